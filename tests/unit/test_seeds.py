"""The seed manifests through `offline.admit` (mutate, apply, validate), and broken variants."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from webhook.admission.dispatch import Policy
from webhook.catalog import load_catalog
from webhook.offline import Result, admit, read_objects

SEEDS = Path(__file__).resolve().parents[1] / "seeds"
POLICY = Policy(load_catalog())
INDEX_REF = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def seed(file: str, kind: str) -> dict[str, Any]:
    (obj,) = [o for _, o in read_objects(str(SEEDS / file)) if o["kind"] == kind]
    return copy.deepcopy(dict(obj))


def v4_job() -> dict[str, Any]:
    return seed("v4-2x2x4-indexed-job.yaml", "Job")


def v5e_pod() -> dict[str, Any]:
    return seed("v5e-2x4-single-host-pod.yaml", "Pod")


def jetstream() -> dict[str, Any]:
    return seed("jetstream-deployment.yaml", "Deployment")


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


def main_container(obj: dict[str, Any]) -> dict[str, Any]:
    return pod_spec(obj)["containers"][0]


@pytest.mark.parametrize("file", sorted(p.name for p in SEEDS.glob("*.yaml")))
def test_every_object_of_every_seed_is_admitted(file: str) -> None:
    results = [admit(obj, POLICY) for _, obj in read_objects(str(SEEDS / file))]
    assert [(r.kind, r.name, r.denials) for r in results if not r.allowed] == []


def test_the_v4_job_is_stored_with_the_worker_id_and_its_four_hostnames() -> None:
    result = admit(v4_job(), POLICY)
    env = main_container(dict(result.stored))["env"]
    assert env == [
        {"name": "TPU_WORKER_ID", "valueFrom": {"fieldRef": {"fieldPath": INDEX_REF}}},
        {
            "name": "TPU_WORKER_HOSTNAMES",
            "value": ",".join(f"tpu-available-chips-{i}.headless-svc" for i in range(4)),
        },
    ]


def test_the_v4_job_gets_no_port_because_8471_and_8431_are_there() -> None:
    result = admit(v4_job(), POLICY)
    assert main_container(dict(result.stored))["ports"] == [
        {"containerPort": 8471},
        {"containerPort": 8431},
    ]
    assert [op["path"] for op in result.patch] == ["/spec/template/spec/containers/0/env"]


def test_the_v4_job_is_only_warned_about_its_memory_above_the_unconfirmed_figure() -> None:
    result = admit(v4_job(), POLICY)
    assert [(w.code, str(w.field)) for w in result.warnings] == [
        (
            "tpu.resources-exceed-node",
            "spec.template.spec.containers[0].resources.requests[memory]",
        )
    ]


def test_the_v5e_pod_keeps_its_limits_and_gains_port_8471_named_tpu_comm() -> None:
    result = admit(v5e_pod(), POLICY)
    container = main_container(dict(result.stored))
    assert result.patch == [
        {
            "op": "add",
            "path": "/spec/containers/0/ports/-",
            "value": {"name": "tpu-comm", "containerPort": 8471, "protocol": "TCP"},
        }
    ]
    assert container["resources"] == {
        "requests": {"google.com/tpu": 8},
        "limits": {"google.com/tpu": 8},
    }
    assert "env" not in container
    assert (result.denials, result.warnings) == ([], [])


def test_the_jetstream_deployment_gains_both_ports_on_the_model_server_only() -> None:
    sent = jetstream()
    result = admit(sent, POLICY)
    server, http = pod_spec(dict(result.stored))["containers"]
    assert server["name"] == "maxengine-server"
    assert server["ports"] == [
        {"containerPort": 9000},
        {"name": "tpu-comm", "containerPort": 8471, "protocol": "TCP"},
        {"name": "tpu-metrics", "containerPort": 8431, "protocol": "TCP"},
    ]
    assert http == pod_spec(sent)["containers"][1]
    assert "env" not in server
    assert (result.denials, result.warnings) == ([], [])


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        target = obj
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return change


def _drop(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        target = obj
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]

    return change


JOB_SPEC = ("spec", "template", "spec")
JOB_MAIN = (*JOB_SPEC, "containers", 0)
POD_MAIN = ("spec", "containers", 0)
DEPLOYMENT_SPEC = ("spec", "template", "spec")
ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY = "cloud.google.com/gke-tpu-topology"

BROKEN: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None], str]] = {
    "v4 job with parallelism 2": (
        v4_job,
        _set(("spec", "parallelism"), 2),
        "tpu.multihost-parallelism",
    ),
    "v4 job without completionMode": (
        v4_job,
        _drop(("spec", "completionMode")),
        "tpu.multihost-not-indexed",
    ),
    "v4 job on topology 2x2x3": (
        v4_job,
        _set((*JOB_SPEC, "nodeSelector", TOPOLOGY), "2x2x3"),
        "tpu.topology-invalid",
    ),
    "v4 job on accelerator tpu-v4-podslise": (
        v4_job,
        _set((*JOB_SPEC, "nodeSelector", ACCELERATOR), "tpu-v4-podslise"),
        "tpu.accelerator-unknown",
    ),
    "v4 job with 8 chips requested but 4 limited": (
        v4_job,
        _set((*JOB_MAIN, "resources", "requests", "google.com/tpu"), 8),
        "tpu.requests-limits-differ",
    ),
    "v4 job with TPU_WORKER_ID 7": (
        v4_job,
        _set((*JOB_MAIN, "env"), [{"name": "TPU_WORKER_ID", "value": "7"}]),
        "tpu.worker-env-conflict",
    ),
    "v4 job named with 62 characters": (
        v4_job,
        _set(("metadata", "name"), "t" * 62),
        "tpu.hostname-too-long",
    ),
    "v5e pod with 300 cpu": (
        v5e_pod,
        _set((*POD_MAIN, "resources", "requests", "cpu"), 300),
        "tpu.resources-exceed-node",
    ),
    "v5e pod with 3 chips": (
        v5e_pod,
        _set((*POD_MAIN, "resources"), {"limits": {"google.com/tpu": 3}}),
        "tpu.chips-per-host",
    ),
    "v5e pod without topology": (
        v5e_pod,
        _drop(("spec", "nodeSelector", TOPOLOGY)),
        "tpu.topology-missing",
    ),
    "v5e pod without accelerator": (
        v5e_pod,
        _drop(("spec", "nodeSelector", ACCELERATOR)),
        "tpu.accelerator-missing",
    ),
    "v5e pod asking four chips in words": (
        v5e_pod,
        _set((*POD_MAIN, "resources"), {"limits": {"google.com/tpu": "four"}}),
        "tpu.quantity-invalid",
    ),
    "v5e pod as one host of a 4x4 slice": (
        v5e_pod,
        lambda obj: (
            _set(("spec", "nodeSelector", TOPOLOGY), "4x4")(obj),
            _set((*POD_MAIN, "resources"), {"limits": {"google.com/tpu": 4}})(obj),
        ),
        "tpu.multihost-unsupported-workload",
    ),
    "jetstream with chips on its http container too": (
        jetstream,
        _set(
            (*DEPLOYMENT_SPEC, "containers", 1, "resources"),
            {"requests": {"google.com/tpu": 8}, "limits": {"google.com/tpu": 8}},
        ),
        "tpu.multiple-tpu-containers",
    ),
    "jetstream on a multi-host 2x4 of 4-chip hosts": (
        jetstream,
        _set((*DEPLOYMENT_SPEC, "containers", 0, "resources"), {"limits": {"google.com/tpu": 4}}),
        "tpu.multihost-unsupported-workload",
    ),
}


@pytest.mark.parametrize(("make", "break_it", "code"), BROKEN.values(), ids=BROKEN.keys())
def test_a_seed_broken_in_one_way_is_denied_for_that_rule_only(
    make: Callable[[], dict[str, Any]],
    break_it: Callable[[dict[str, Any]], None],
    code: str,
) -> None:
    obj = make()
    break_it(obj)
    result: Result = admit(obj, POLICY)
    assert [v.code for v in result.denials] == [code]
