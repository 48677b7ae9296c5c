"""The rule registry: every code the policy emits is defined once, with a real example message.

Each rule's example is what the policy says for one input here (so the reference cannot drift
from the product), the README's table is the registry's, and no policy module names a code the
registry lacks. An example that would spell out the catalog's accelerators is the policy's
message under a small catalog of the test's own, so that a new TPU generation changes neither
the registry nor the README.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.unit import apply, workload_of
from tests.unit.test_messages import chips, pod, v4_job
from webhook import cli
from webhook.catalog import Catalog, load_catalog
from webhook.policy import decide
from webhook.policy.cluster import EMPTY, view_of
from webhook.policy.rules import BY_CODE, RULES, rules_table
from webhook.policy.stored import missing

CATALOG = load_catalog()
ROOT = Path(__file__).resolve().parents[2]


def _deployment() -> dict[str, Any]:
    job = v4_job()
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve"},
        "spec": {"replicas": 4, "template": job["spec"]["template"]},
    }


def _two_tpu_containers() -> dict[str, Any]:
    obj = pod("tpu-v5-lite-podslice", "2x2", **chips(4))
    obj["spec"]["containers"].append({**obj["spec"]["containers"][0], "name": "side"})
    return obj


def _worker_id(value: str) -> dict[str, Any]:
    job = v4_job()
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "TPU_WORKER_ID", "value": value}
    ]
    return job


def _host_network() -> dict[str, Any]:
    job = v4_job()
    job["spec"]["template"]["spec"]["hostNetwork"] = True
    return job


def _subdomain_defaulted() -> dict[str, Any]:
    job = v4_job()
    del job["spec"]["template"]["spec"]["subdomain"]
    return job


def _jobset(**network: Any) -> dict[str, Any]:
    """A JobSet of a Pathways head and 2 v6e 4x4 slices; `network` as given."""
    pod_spec = v4_job()["spec"]["template"]["spec"]
    pod_spec = {
        **pod_spec,
        "nodeSelector": {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
            "cloud.google.com/gke-tpu-topology": "4x4",
        },
    }
    del pod_spec["subdomain"]
    slice_job = {
        "parallelism": 4,
        "completions": 4,
        "backoffLimit": 0,
        "template": {"spec": pod_spec},
    }
    head = {"template": {"spec": {"containers": [{"name": "head", "image": "pathways"}]}}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train"},
        "spec": {
            "network": network,
            "replicatedJobs": [
                {"name": "head", "replicas": 1, "template": {"spec": head}},
                {"name": "slice", "replicas": 2, "template": {"spec": slice_job}},
            ],
        },
    }


def _megascale() -> dict[str, Any]:
    obj = _jobset()
    container = obj["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    container["env"] = [{"name": "MEGASCALE_NUM_SLICES", "value": "3"}]
    return obj


def _leader_elsewhere() -> dict[str, Any]:
    worker = {
        "spec": {
            "nodeSelector": {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                "cloud.google.com/gke-tpu-topology": "4x4",
            },
            "containers": [{"name": "vllm", "image": "vllm", "resources": chips(4)}],
        }
    }
    leader = {"spec": {**worker["spec"], "nodeSelector": {**worker["spec"]["nodeSelector"]}}}
    leader["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] = "2x4"
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm"},
        "spec": {
            "leaderWorkerTemplate": {"size": 4, "leaderTemplate": leader, "workerTemplate": worker}
        },
    }


def _class_pod(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vllm"},
        "spec": {
            "nodeSelector": {"cloud.google.com/compute-class": name},
            "containers": [{"name": "server", "image": "vllm", "resources": chips(count)}],
        },
    }


def _compute_class(name: str, accelerator: str, count: int, topology: str) -> dict[str, Any]:
    tpu = {"type": accelerator, "count": count, "topology": topology}
    return {
        "apiVersion": "cloud.google.com/v1",
        "kind": "ComputeClass",
        "metadata": {"name": name},
        "spec": {"priorities": [{"tpu": tpu}]},
    }


def _claim_template(expression: str) -> dict[str, Any]:
    request = {
        "deviceClassName": "tpu.google.com",
        "allocationMode": "All",
        "selectors": [{"cel": {"expression": expression}}],
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "tpus", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "tpus", "exactly": request}]}}},
    }


def _kueue_slices() -> dict[str, Any]:
    """kueue#15277's Job: 5 Pods in Kueue slices of 2."""
    obj = v4_job(parallelism=5)
    level = "cloud.google.com/gke-tpu-slice-2x4-id"
    obj["spec"]["template"]["metadata"] = {
        "annotations": {
            "kueue.x-k8s.io/podset-slice-required-topology": level,
            "kueue.x-k8s.io/podset-slice-size": "2",
        }
    }
    return obj


def _claim_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "tpu-test", "namespace": "default"},
        "spec": {
            "resourceClaims": [{"name": "tpus", "resourceClaimTemplateName": "tpus"}],
            "containers": [
                {"name": "main", "image": "jax", "resources": {"claims": [{"name": "tpus"}]}}
            ],
        },
    }


def _not_offered() -> tuple[dict[str, Any], Any]:
    """A v6e 4x4 Job on a cluster whose only TPU nodes are a v6e 2x4 pool's two."""
    job = v4_job()
    job["spec"]["template"]["spec"]["nodeSelector"] = {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }
    labels = {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "2x4",
        "cloud.google.com/gke-nodepool": "v6e-2x4",
    }
    nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}", "labels": labels}}
        for i in range(2)
    ]
    return job, view_of(nodes)


def _many_containers() -> dict[str, Any]:
    obj = pod("tpu-v5-lite-podslice", "2x4", **chips(8))
    sidecar = {"name": "sidecar", "image": "busybox"}
    obj["spec"]["containers"] += [{**sidecar, "name": f"sidecar-{i}"} for i in range(199)]
    return obj


# One input per code, whose messages include the registry's example.
INPUTS: dict[str, Any] = {
    "tpu.accelerator-missing": lambda: pod(None, "2x4", **chips(4)),
    "tpu.topology-missing": lambda: pod("tpu-v5-lite-podslice", None, **chips(4)),
    "tpu.accelerator-unknown": lambda: pod("tpu-v6e", "2x4", **chips(8)),
    "tpu.topology-invalid": lambda: pod("tpu-v5-lite-podslice", "2x3", **chips(6)),
    "tpu.chips-per-host": lambda: pod("tpu-v5-lite-podslice", "2x4", limits={"google.com/tpu": 3}),
    "tpu.requests-limits-differ": lambda: pod(
        "tpu-v5-lite-podslice",
        "2x4",
        requests={"google.com/tpu": 4},
        limits={"google.com/tpu": 8},
    ),
    "tpu.multiple-tpu-containers": _two_tpu_containers,
    "tpu.resources-exceed-node": lambda: pod("tpu-v5-lite-podslice", "2x4", **chips(8, cpu="300")),
    "tpu.multihost-not-indexed": lambda: v4_job(completionMode=None),
    "tpu.multihost-parallelism": lambda: v4_job(parallelism=2),
    "tpu.multihost-unsupported-workload": _deployment,
    "tpu.worker-env-conflict": lambda: _worker_id("4"),
    "tpu.hostname-too-long": lambda: v4_job(
        name="gemma-2-27b-pretrain-v4-2x2x4-learning-rate-sweep-run-00000042"
    ),
    "tpu.quantity-invalid": lambda: pod(
        "tpu-v5-lite-podslice", "2x4", limits={"google.com/tpu": "1.5"}
    ),
    "tpu.multihost-retries": lambda: v4_job(backoffLimit=None),
    "tpu.subdomain-defaulted": _subdomain_defaulted,
    "tpu.host-network-dns": _host_network,
    "tpu.hostnames-disabled": lambda: _jobset(enableDNSHostnames=False),
    "tpu.slice-shape-mismatch": _leader_elsewhere,
    "tpu.multislice-env-conflict": _megascale,
    "tpu.checked-partly": _many_containers,
    "tpu.compute-class-mismatch": lambda: (
        _class_pod("tpu-v6e-2x2", 8),
        view_of([_compute_class("tpu-v6e-2x2", "tpu-v6e-slice", 4, "2x2")]),
    ),
    "tpu.compute-class-unknown": lambda: _class_pod("tpu-v5e-2x4", 8),
    "tpu.claim-invalid": lambda: _claim_template(
        'device.attributes["tpu.google.com"].tpuGenn == "v6e"'
    ),
    "tpu.kueue-slices": _kueue_slices,
    "tpu.shape-not-offered": _not_offered,
    "tpu.worker-env-missing": v4_job,  # stored as written: without the worker variables
    "tpu.autopilot-refused": lambda: (_host_network(), EMPTY, "autopilot"),
    "tpu.toleration-missing": lambda: (
        _claim_pod(),
        view_of(
            [_claim_template('device.attributes["tpu.google.com"].accelerator == "tpu-v6e-slice"')],
            dra_classes=["tpu.google.com"],
            dra_driver="tpu.google.com",
        ),
    ),
}


# The catalogs of the inputs whose messages list every accelerator of the catalog they are
# decided against: a whole catalog (replacePackaged), two accelerators.
SMALL_CATALOG = """
version: 1
replacePackaged: true
accelerators:
  - name: tpu-v5-lite-podslice
    dimensions: 2
    machineTypes: [{name: ct5lp-hightpu-4t, chips: 4}]
    singleHost: [2x2]
  - name: tpu-v6e-slice
    dimensions: 2
    machineTypes: [{name: ct6e-standard-4t, chips: 4}]
    singleHost: [2x2]
"""
CATALOGS = {"tpu.accelerator-missing": SMALL_CATALOG}


def all_messages(given: Any, catalog: Catalog = CATALOG) -> dict[str, list[str]]:
    """Every message `kubectl create` would print for an object (or an (object, cluster view)
    pair), by code: mutate, then validate, against `catalog`."""
    obj, cluster, profile = (
        (*given, "standard")[:3] if isinstance(given, tuple) else (given, EMPTY, "standard")
    )
    workload = workload_of(obj)
    mutated = decide.mutate(obj, workload, catalog, decide.Options())
    stored = apply(obj, mutated.patch)
    options = decide.Options(profile=profile)
    verdict = decide.validate(stored, workload, catalog, None, options, cluster)
    found: dict[str, list[str]] = {}
    for v in (
        *mutated.warnings,
        *verdict.denials,
        *verdict.warnings,
        *missing(mutated.patch),
    ):
        found.setdefault(v.code, []).append(v.message)
    return found


def test_every_rule_has_one_input_here() -> None:
    assert sorted(INPUTS) == sorted(BY_CODE)


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_a_rule_example_is_the_message_the_policy_gives(rule: Any, tmp_path: Path) -> None:
    catalog = CATALOG
    if rule.code in CATALOGS:
        (tmp_path / "catalog.yaml").write_text(CATALOGS[rule.code], "utf-8")
        catalog = load_catalog(tmp_path / "catalog.yaml")
    assert rule.example in all_messages(INPUTS[rule.code](), catalog).get(rule.code, [])


def test_no_example_lists_the_packaged_catalog() -> None:
    names = CATALOG.names()
    assert [r.code for r in RULES if names in r.example] == []


def test_codes_are_unique_dotted_kebab_case() -> None:
    codes = [r.code for r in RULES]
    assert len(codes) == len(set(codes))
    assert [c for c in codes if not re.fullmatch(r"tpu\.[a-z]+(-[a-z]+)*", c)] == []


def test_the_policy_names_no_code_the_registry_lacks() -> None:
    named = set()
    for path in (ROOT / "webhook" / "policy").rglob("*.py"):
        if path.name != "rules.py":
            named |= set(re.findall(r'"(tpu\.[a-z-]+)"', path.read_text("utf-8")))
    assert named == set(BY_CODE)


def test_the_readme_rules_table_is_the_registry() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    assert rules_table() in readme


def test_the_rules_command_lists_every_code_and_nothing_else(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["rules"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [r.code for r in RULES]


def test_the_rules_command_explains_one_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["rules", "tpu.chips-per-host"]) == 0
    out = capsys.readouterr().out
    rule = BY_CODE["tpu.chips-per-host"]
    assert out.splitlines()[0] == "tpu.chips-per-host (denies)"
    assert f"  why:     {rule.why}" in out.splitlines()
    assert f"  example: {rule.example}" in out.splitlines()


def test_the_rules_command_refuses_an_unknown_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["rules", "tpu.nope"]) == 2
    assert capsys.readouterr().err == "error: no rule tpu.nope; `tpu-webhook rules` lists them\n"
