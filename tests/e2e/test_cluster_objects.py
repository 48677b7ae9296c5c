"""What the webhook reads from the cluster, against the real API server: GKE ComputeClasses, DRA
ResourceClaimTemplates and Kubeflow Trainer's ClusterTrainingRuntimes stored there, listed by
`tpu-webhook serve --cluster-objects` with exactly the chart's read-only RBAC (a token of the
chart's ServiceAccount), and the decisions that read them.

ComputeClasses are GKE's CRD: a hand-written CRD of its shape is installed
(tests/e2e/data/computeclass-crd.yaml). `resource.k8s.io/v1` is served by this Kubernetes.
Trainer's CRDs (from its pinned module) are installed while the server runs: a kind served
later is read from the next sync on.
The suite's own registration (default settings) may be live too: it warns that it does not know
a class and never refuses what this server admits, so each verdict here is this server's.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dev.chart import url_mode_configurations
from dev.controlplane import ControlPlane
from dev.operator_crds import crd_dirs, install_crds
from tests.support.chart_identity import chart_rbac, token_kubeconfig
from tests.support.webhook_process import WebhookProcess, make_certs

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DATA = Path(__file__).parent / "data"
RUN = uuid.uuid4().hex[:6]
RELEASE = f"cluster-{RUN}"
NAMESPACE = f"tpu-webhook-{RUN}"
WORK = f"work-{RUN}"
CLASS = f"tpu-v6e-2x2-{RUN}"


def compute_class(name: str, chips: int, topology: str) -> dict[str, Any]:
    tpu = {"type": "tpu-v6e-slice", "count": chips, "topology": topology}
    return {
        "apiVersion": "cloud.google.com/v1",
        "kind": "ComputeClass",
        "metadata": {"name": name},
        "spec": {"priorities": [{"tpu": tpu}], "nodePoolAutoCreation": {"enabled": True}},
    }


def class_pod(class_name: str, chips: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"vllm-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "nodeSelector": {"cloud.google.com/compute-class": class_name},
            "containers": [
                {
                    "name": "server",
                    "image": "vllm",
                    "resources": {"limits": {"google.com/tpu": str(chips)}},
                }
            ],
        },
    }


def dry_run(cp: ControlPlane, obj: dict[str, Any]) -> Any:
    return cp.kubectl("create", "--dry-run=server", "-n", WORK, "-f", "-", input=json.dumps(obj))


@pytest.fixture(scope="module")
def server(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    cp = control_plane
    cp.kubectl("apply", "-f", str(DATA / "computeclass-crd.yaml"), check=True)
    cp.kubectl("wait", "--for=condition=Established", "crd/computeclasses.cloud.google.com",
               "--timeout=60s", check=True)  # fmt: skip
    for name in (NAMESPACE, WORK):
        cp.kubectl("create", "namespace", name, check=True)
    rbac = chart_rbac(RELEASE, NAMESPACE)
    cp.kubectl("apply", "-f", "-", input="\n".join(json.dumps(o) for o in rbac), check=True)
    (account,) = [o["metadata"]["name"] for o in rbac if o["kind"] == "ServiceAccount"]
    work = tmp_path_factory.mktemp("cluster-objects")
    make_certs(work)
    environment = {
        "TPU_WEBHOOK_CLUSTER_OBJECTS": "true",
        "TPU_WEBHOOK_CLUSTER_SYNC_SECONDS": "1",
        "TPU_WEBHOOK_KUBECONFIG": str(
            token_kubeconfig(cp, account, NAMESPACE, work / "kubeconfig")
        ),
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(compute_class(CLASS, 4, "2x2")), check=True)
    with WebhookProcess(work, env=environment) as process:
        configurations = url_mode_configurations(
            process.url, process.ca_file.read_bytes(), release=RELEASE
        )
        manifest = "\n".join(json.dumps(c) for c in configurations)
        cp.kubectl("apply", "-f", "-", input=manifest, check=True)
        try:
            # live once this server refuses a Pod that fits no priority of the stored class
            deadline = time.monotonic() + 60
            while "tpu.compute-class-mismatch" not in (
                proc := dry_run(cp, class_pod(CLASS, 8))
            ).stderr + str(_codes(process)):
                assert time.monotonic() < deadline, proc.stderr
                time.sleep(0.5)
            yield process
        finally:
            cp.kubectl("delete", "-f", "-", input=manifest)
            cp.kubectl("delete", "computeclass", "--all")
            for name in (NAMESPACE, WORK):
                cp.kubectl("delete", "namespace", name, "--wait=false")


def _codes(process: WebhookProcess) -> list[str]:
    return [
        code
        for line in process.logs().splitlines()
        if line.startswith('{"ts"')
        for code in json.loads(line).get("rules", [])
    ]


def test_a_pod_that_fits_no_priority_of_a_stored_compute_class_is_refused(
    control_plane: ControlPlane, server: WebhookProcess
) -> None:
    proc = dry_run(control_plane, class_pod(CLASS, 8))
    assert proc.returncode != 0
    assert (
        'admission webhook "validate.tpu-webhook.io" denied the request: '
        "spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 8: compute class "
        f"{CLASS} priority 1 (tpu-v6e-slice 2x2, 4 chips per node): tpu-v6e-slice 2x2 runs 4 "
        "chips per host; set requests and limits to 4"
    ) in proc.stderr


def test_a_pod_that_fits_its_stored_compute_class_is_admitted(
    control_plane: ControlPlane, server: WebhookProcess
) -> None:
    proc = dry_run(control_plane, class_pod(CLASS, 4))
    assert proc.returncode == 0, proc.stderr


def test_a_pod_on_a_class_the_cluster_does_not_have_is_warned_that_it_does_not_exist(
    control_plane: ControlPlane, server: WebhookProcess
) -> None:
    proc = dry_run(control_plane, class_pod(f"nope-{RUN}", 8))
    assert proc.returncode == 0, proc.stderr
    assert f"there is no compute class nope-{RUN} in the cluster" in proc.stderr


def test_a_class_created_later_is_read_within_the_sync_period(
    control_plane: ControlPlane, server: WebhookProcess
) -> None:
    later = f"later-{RUN}"
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(compute_class(later, 4, "2x2")))
    created = time.monotonic()
    # at first the class is not known ("there is no compute class"), then it is read
    while (proc := dry_run(control_plane, class_pod(later, 8))).returncode == 0:
        assert f"there is no compute class {later} in the cluster" in proc.stderr
        assert time.monotonic() - created < 30, proc.stderr
        time.sleep(0.25)
    assert f"compute class {later} priority 1" in proc.stderr


def test_a_multi_host_dra_job_is_held_to_its_stored_claim_templates_slice(
    control_plane: ControlPlane, server: WebhookProcess
) -> None:
    selector = (
        'device.attributes["tpu.google.com"].accelerator == "tpu-v6e-slice" && '
        'device.attributes["tpu.google.com"].topology == "4x4"'
    )
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "v6e-4x4", "namespace": WORK},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "tpus",
                            "exactly": {
                                "deviceClassName": "tpu.google.com",
                                "allocationMode": "All",
                                "selectors": [{"cel": {"expression": selector}}],
                            },
                        }
                    ]
                }
            }
        },
    }
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(template), check=True)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": 2,
            "completions": 2,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "subdomain": "train",
                    "restartPolicy": "Never",
                    "tolerations": [{"key": "google.com/tpu", "operator": "Exists"}],
                    "resourceClaims": [{"name": "tpus", "resourceClaimTemplateName": "v6e-4x4"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "jax",
                            "resources": {"claims": [{"name": "tpus"}]},
                        }
                    ],
                }
            },
        },
    }
    deadline = time.monotonic() + 30
    while "spec.parallelism: Invalid value" not in (proc := dry_run(control_plane, job)).stderr:
        assert time.monotonic() < deadline, proc.stderr
        time.sleep(0.25)
    assert proc.returncode != 0
    assert (
        "spec.parallelism: Invalid value: 2: 4x4 = 16 chips at 4 per host needs 4 hosts; set "
        "spec.parallelism and spec.completions to 4"
    ) in proc.stderr


def test_a_claim_template_the_driver_cannot_allocate_is_refused(
    control_plane: ControlPlane, server: WebhookProcess
) -> None:
    broken = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "typo", "namespace": WORK},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "tpus",
                            "exactly": {
                                "deviceClassName": "tpu.google.com",
                                "allocationMode": "All",
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": 'device.attributes["tpu.google.com"]'
                                            '.tpuGenn == "v6e"'
                                        }
                                    }
                                ],
                            },
                        }
                    ]
                }
            }
        },
    }
    proc = dry_run(control_plane, broken)
    assert proc.returncode != 0
    assert (
        "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: "
    ) in proc.stderr
    assert 'did you mean "tpuGen"?' in proc.stderr


def test_a_trainjob_is_held_to_the_slice_of_its_stored_runtime(
    control_plane: ControlPlane, server: WebhookProcess
) -> None:
    """The guide's TrainJob names nothing of its slice: its runtime (v5e 2x4: 2 hosts) does. A
    user who asks for 3 nodes is refused once the server has read the runtime."""
    install_crds(control_plane, [crd_dirs(["trainer"])["trainer"]], time.monotonic() + 120)
    runtime = DATA / "trainer-runtime-jax-tpu-v5-8.yaml"
    control_plane.kubectl("apply", "-f", str(runtime), check=True)
    try:
        trainjob = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "jax-mnist"},
            "spec": {
                "runtimeRef": {"name": "jax-tpu-v5-8"},
                "trainer": {"numNodes": 3, "command": ["python", "train.py"]},
            },
        }
        deadline = time.monotonic() + 30
        while "spec.trainer.numNodes" not in (proc := dry_run(control_plane, trainjob)).stderr:
            assert time.monotonic() < deadline, proc.stderr
            time.sleep(0.25)
        assert proc.returncode != 0
        assert (
            "spec.trainer.numNodes: Invalid value: 3: tpu-v5-lite-podslice 2x4 = 8 chips at 4 per "
            "host needs 2 hosts, one Pod per host; set numNodes to 2"
        ) in proc.stderr
        trainjob["spec"]["trainer"]["numNodes"] = 2
        assert dry_run(control_plane, trainjob).returncode == 0
    finally:
        control_plane.kubectl("delete", "--ignore-not-found", "-f", str(runtime))


def test_the_chart_s_role_reads_the_cluster_objects_and_nothing_else(
    control_plane: ControlPlane, server: WebhookProcess
) -> None:
    (account,) = [
        o["metadata"]["name"]
        for o in chart_rbac(RELEASE, NAMESPACE)
        if o["kind"] == "ServiceAccount"
    ]
    who = f"system:serviceaccount:{NAMESPACE}:{account}"
    allowed = {
        (verb, resource): control_plane.kubectl(
            "auth", "can-i", verb, resource, "--all-namespaces", f"--as={who}"
        ).stdout.strip()
        for verb in ("list", "watch", "create", "delete")
        for resource in (
            "computeclasses.cloud.google.com",
            "resourceclaimtemplates.resource.k8s.io",
            "secrets",
            "pods",
            "nodes",
        )
    }
    assert {k for k, v in allowed.items() if v == "yes"} == {
        ("list", "computeclasses.cloud.google.com"),
        ("watch", "computeclasses.cloud.google.com"),
        ("list", "resourceclaimtemplates.resource.k8s.io"),
        ("watch", "resourceclaimtemplates.resource.k8s.io"),
        ("list", "nodes"),  # the TPU shapes offered (offeredShapes.sources)
        ("watch", "nodes"),
    }
