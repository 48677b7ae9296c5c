"""`tpu-webhook audit` against the real API server: the TPU workloads stored in the cluster,
decided as the webhook decides them today, and the PolicyReports it writes.

The PolicyReport CRDs are the Policy working group's own (tests/e2e/data/crds/, copied with
their source). A broken TPU Job (parallelism 2 for a slice of 4 hosts) is created in a namespace
labelled `tpu-webhook.io/mode=warn`, which the chart routes to the warn endpoint: the API server
stores it with the webhook's warning, as a team that turned enforcement on later would have it.
Then the commands run as a user types them, and `kubectl get policyreports` reads what was
written. The periodic audit is a `tpu-webhook serve` with TPU_WEBHOOK_AUDIT_INTERVAL_SECONDS=2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dev.controlplane import ControlPlane
from dev.tools import REPO_ROOT, tools_dir
from tests.e2e.conftest import wait_for
from tests.support.chart_identity import chart_rbac, token_kubeconfig
from tests.support.webhook_process import WebhookProcess, make_certs

pytestmark = pytest.mark.e2e

CRDS = sorted((Path(__file__).parent / "data" / "crds").glob("wgpolicyk8s.io_*.yaml"))
SCRIPTS = Path(sys.executable).parent  # tpu-webhook and kubectl-tpu of this venv
RULE = "tpu.multihost-parallelism"


def tpu_job(name: str, parallelism: int) -> dict[str, Any]:
    """An Indexed Job on tpu-v6e-slice 4x4: 16 chips at 4 per host, 4 hosts."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "subdomain": name,
                    "restartPolicy": "Never",
                    "nodeSelector": {
                        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                        "cloud.google.com/gke-tpu-topology": "4x4",
                    },
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer",
                            "resources": {"limits": {"google.com/tpu": "4"}},
                        }
                    ],
                }
            },
        },
    }


def plain_job(name: str) -> dict[str, Any]:
    job = tpu_job(name, 1)
    spec = job["spec"]["template"]["spec"]
    del spec["nodeSelector"]
    spec["containers"][0]["resources"] = {}
    return job


def run(cp: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    """`tpu-webhook ARGS` (or `kubectl tpu ARGS` with args[0] == "kubectl") as a user runs it."""
    env = {
        "PATH": os.pathsep.join([str(SCRIPTS), str(tools_dir()), "/usr/bin", "/bin"]),
        "HOME": os.environ.get("HOME", "/root"),
        "KUBECONFIG": str(cp.kubeconfig),
    }
    command = [str(tools_dir() / "kubectl"), *args[1:]] if args[0] == "kubectl" else [
        str(SCRIPTS / "tpu-webhook"), *args
    ]  # fmt: skip
    return subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def create(cp: ControlPlane, namespace: str, obj: dict[str, Any]) -> str:
    done = cp.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj))
    assert done.returncode == 0, done.stderr
    return done.stderr


def reports(cp: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    got = cp.kubectl("get", "policyreports", "-n", namespace, "-o", "json", check=True)
    return list(json.loads(got.stdout)["items"])


@pytest.fixture(scope="module")
def policy_reports(control_plane: ControlPlane) -> Iterator[None]:
    """The PolicyReport and ClusterPolicyReport CRDs, served; removed (with every report)
    after this module."""
    for crd in CRDS:
        control_plane.kubectl("apply", "--server-side", "-f", str(crd), check=True)
    control_plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/policyreports.wgpolicyk8s.io", "crd/clusterpolicyreports.wgpolicyk8s.io", check=True,
    )  # fmt: skip
    wait_for(lambda: control_plane.kubectl("get", "policyreports", "-A").returncode == 0)
    try:
        yield
    finally:
        for crd in CRDS:
            control_plane.kubectl("delete", "-f", str(crd), "--wait=false")


def warn_namespace(cp: ControlPlane) -> str:
    name = f"audit-{uuid.uuid4().hex[:8]}"
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"tpu-webhook.io/mode": "warn"}},
    }
    cp.kubectl("create", "-f", "-", input=json.dumps(namespace), check=True)
    return name


@pytest.fixture
def team(
    control_plane: ControlPlane, registered: list[dict[str, Any]], policy_reports: None
) -> Iterator[str]:
    """A warn-mode namespace holding a broken TPU Job, a correct one and a Job without TPUs."""
    name = warn_namespace(control_plane)
    warned = create(control_plane, name, tpu_job("broken", 2))
    assert "Warning: spec.parallelism: Invalid value: 2: 4x4 = 16 chips" in warned
    create(control_plane, name, tpu_job("correct", 4))
    create(control_plane, name, plain_job("no-tpu"))
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false")


def test_audit_finds_the_broken_job_and_writes_a_policy_report(
    control_plane: ControlPlane, team: str
) -> None:
    audited = run(control_plane, "audit", "-A", "--policy-reports")
    assert audited.returncode == 1, audited.stderr
    header, *rows = audited.stdout.splitlines()
    assert header.split() == ["NAMESPACE", "KIND", "NAME", "VERDICT", "FINDINGS"]
    mine = sorted(row.split() for row in rows if row.startswith(team + " "))
    assert [row for row in mine if row[1] == "Job"] == [
        [team, "Job", "broken", "denied", RULE],
        [team, "Job", "correct", "admitted", "<none>"],
    ]
    pods = [row[2].rsplit("-", 2)[0] for row in mine if row[1] == "Pod" and row[3] == "admitted"]
    assert sorted(pods) == ["broken"] * 2 + ["correct"] * 4  # the Job controller's, checked too

    listed = control_plane.kubectl("get", "policyreports", "-A", check=True).stdout
    row = next(line.split() for line in listed.splitlines() if line.startswith(team + " "))
    # NAMESPACE NAME PASS FAIL WARN: a fail for each of the broken Job's two fields
    assert row[:5] == [team, "tpu-webhook", "7", "2", "0"]
    (stored,) = reports(control_plane, team)
    failed = [r for r in stored["results"] if r["result"] == "fail"]
    assert {(r["rule"], r["resources"][0]["name"], r["policy"], r["source"]) for r in failed} == {
        (RULE, "broken", "tpu-webhook", "tpu-webhook")
    }
    assert sorted(r["message"].split(":")[0] for r in failed) == [
        "spec.completions",
        "spec.parallelism",
    ]
    assert failed[0]["message"].endswith(
        ": Invalid value: 2: 4x4 = 16 chips at 4 per host needs 4 hosts; set spec.parallelism "
        "and spec.completions to 4"
    )
    assert stored["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "tpu-webhook"}


def test_a_second_audit_replaces_its_report_and_a_fixed_namespace_loses_it(
    control_plane: ControlPlane, team: str
) -> None:
    assert run(control_plane, "audit", "-n", team, "--policy-reports").returncode == 1
    (first,) = reports(control_plane, team)
    assert run(control_plane, "audit", "-n", team, "--policy-reports").returncode == 1
    (again,) = reports(control_plane, team)
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    control_plane.kubectl("delete", "job", "broken", "-n", team, "--cascade=foreground", check=True)
    fixed = run(control_plane, "kubectl", "tpu", "audit", "-n", team, "--policy-reports")
    assert fixed.returncode == 0
    assert [row.split() for row in fixed.stdout.splitlines() if "broken" in row] == []
    (replaced,) = reports(control_plane, team)
    assert replaced["summary"] == {"pass": 5, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    assert replaced["metadata"]["uid"] == first["metadata"]["uid"]

    control_plane.kubectl(
        "delete", "job", "correct", "-n", team, "--cascade=foreground", check=True
    )
    emptied = run(control_plane, "audit", "-n", team, "--policy-reports")
    assert (emptied.returncode, emptied.stderr) == (
        0,
        f"No TPU workloads found in {team} namespace.\n",
    )
    assert reports(control_plane, team) == []


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_audit_prints_json_and_yaml(control_plane: ControlPlane, team: str, output: str) -> None:
    from ruamel.yaml import YAML

    audited = run(control_plane, "audit", "-n", team, "-o", output)
    loaded = YAML(typ="safe", pure=True).load(audited.stdout)  # JSON is YAML
    assert audited.returncode == 1
    assert [(a["kind"], a["name"], a["verdict"]) for a in loaded if a["kind"] == "Job"] == [
        ("Job", "broken", "denied"),
        ("Job", "correct", "admitted"),
    ]
    assert {v["code"] for v in loaded[0]["violations"]} == {RULE}
    assert loaded[0]["asks"] == ["tpu-v6e-slice 4x4 = 16 chips at 4 per host needs 4 hosts"]


def test_audit_names_an_unknown_context_in_one_line(control_plane: ControlPlane, team: str) -> None:
    missing = run(control_plane, "audit", "-n", team, "--context", "nowhere")
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == 'error: context "nowhere" does not exist\n'


def test_the_server_audits_periodically_and_writes_the_report(
    control_plane: ControlPlane,
    registered: list[dict[str, Any]],
    policy_reports: None,
    tmp_path: Path,
) -> None:
    namespace = warn_namespace(control_plane)
    try:
        create(control_plane, namespace, tpu_job("broken", 2))
        make_certs(tmp_path)
        environment = {
            "TPU_WEBHOOK_KUBECONFIG": str(control_plane.kubeconfig),
            "TPU_WEBHOOK_AUDIT_INTERVAL_SECONDS": "2",
        }
        with WebhookProcess(tmp_path, env=environment) as server:
            (stored,) = wait_for(lambda: reports(control_plane, namespace), timeout=60)
            log = server.wait_for_log('"msg":"audit: ')
        assert stored["summary"]["fail"] == 2  # parallelism and completions
        assert {(r["rule"], r["result"]) for r in stored["results"]} == {
            (RULE, "fail"),
            ("validate", "pass"),  # the broken Job's two Pods
        }
        assert "would be denied" in log
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


def chart_identity(cp: ControlPlane, directory: Path, sets: dict[str, str]) -> Path:
    """The chart's ServiceAccount and ClusterRoles for `sets`, applied; a kubeconfig with a
    token of that account (what the server's Pod gets)."""
    values = [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]
    rbac = chart_rbac(f"audit-{uuid.uuid4().hex[:6]}", "default", values)
    cp.kubectl("apply", "-f", "-", input="\n".join(json.dumps(o) for o in rbac), check=True)
    (account,) = [o["metadata"]["name"] for o in rbac if o["kind"] == "ServiceAccount"]
    return token_kubeconfig(cp, account, "default", directory / "kubeconfig")


def test_the_chart_s_audit_role_is_enough_for_the_server(
    control_plane: ControlPlane, team: str, tmp_path: Path
) -> None:
    kubeconfig = chart_identity(
        control_plane, tmp_path, {"audit.enabled": "true", "clusterObjects.enabled": "false"}
    )
    control_plane.kubectl("delete", "policyreport", "tpu-webhook", "-n", team)
    make_certs(tmp_path)
    environment = {
        "TPU_WEBHOOK_KUBECONFIG": str(kubeconfig),
        "TPU_WEBHOOK_AUDIT_INTERVAL_SECONDS": "1",
    }
    with WebhookProcess(tmp_path, env=environment) as server:
        (stored,) = wait_for(lambda: reports(control_plane, team), timeout=60)
        log = server.wait_for_log("would be denied")
    assert stored["summary"]["fail"] == 2
    assert "cannot " not in log  # RBAC refusals say "User ... cannot list resource ..."


def test_kinds_the_identity_may_not_list_are_named_in_one_line_each(
    control_plane: ControlPlane, team: str, tmp_path: Path
) -> None:
    kubeconfig = chart_identity(control_plane, tmp_path, {})  # clusterObjects' role only
    audited = run(control_plane, "audit", "-A", "--kubeconfig", str(kubeconfig))
    lines = audited.stderr.splitlines()
    assert (audited.returncode, audited.stdout) == (0, "")
    assert lines[0].startswith(
        'warning: Pods not audited: pods is forbidden: User "system:serviceaccount:default:'
    )
    assert lines[0].endswith('cannot list resource "pods" in API group "" at the cluster scope')
    assert "warning: JobSets not audited: jobsets.jobset.x-k8s.io is forbidden" in audited.stderr
    assert lines[-1] == "No TPU workloads found."
