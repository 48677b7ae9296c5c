"""Properties of mutation on generated Pods and Jobs: it only adds, never rewrites, and is stable.

Every generated object is mutated, the patch applied with jsonpatch, and the result checked:
only `add` operations, none landing on a present key, every input leaf unchanged, mutating again
yields nothing, and validation of the input and of the result never raises.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit import MISSING, apply, leaves, overwritten, resolve, workload_of
from webhook.catalog import load_catalog
from webhook.policy import decide

CATALOG = load_catalog()
OPTIONS = decide.Options()
ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY = "cloud.google.com/gke-tpu-topology"
TPU = "google.com/tpu"
SLICES = sorted(
    (name, topology)
    for name, accelerator in CATALOG.accelerators.items()
    for topology in (*accelerator.single_host, *accelerator.multi_host)
)
NAMES = st.sampled_from(["train", "tpu-job", "a" * 61, "x"])


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A value or the marker for "leave the field out"."""
    return st.one_of(st.just(MISSING), strategy)


def mapping(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts with a random subset of `fields` (a field drawn as MISSING is left out)."""
    return st.fixed_dictionaries({k: maybe(v) for k, v in fields.items()}).map(
        lambda d: {k: v for k, v in d.items() if v is not MISSING}
    )


selectors = st.one_of(
    st.sampled_from(SLICES).map(lambda s: {ACCELERATOR: s[0], TOPOLOGY: s[1]}),
    mapping(
        **{
            ACCELERATOR: st.sampled_from(
                ["tpu7", "tpu-v9-slice", "tpu-v5p-slise", *CATALOG.accelerators]
            ),
            TOPOLOGY: st.sampled_from(["2x4", "2x2x4", "4x4", "abc", "2x2x1"]),
        }
    ),
)
quantities = {
    TPU: st.sampled_from([1, 4, 8, "4", "8", 3, "four", "-4"]),
    "cpu": st.sampled_from(["1", "500m", 10, "300"]),
    "memory": st.sampled_from(["1Gi", "64Gi", "500Gi"]),
}
resources = st.one_of(
    mapping(requests=mapping(**quantities), limits=mapping(**quantities)),
    st.just([]),
    mapping(requests=mapping(**quantities), limits=st.just([])),
)
ports = st.one_of(
    st.lists(
        mapping(
            name=st.sampled_from(["tpu-comm", "tpu-metrics", "tpu-comm-2", "http"]),
            containerPort=st.sampled_from([8471, 8431, 9000, 8080]),
            protocol=st.just("TCP"),
        ),
        max_size=3,
    ),
    st.just("8471"),
)
env_entries = st.one_of(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "JAX_PLATFORMS"]),
            "value": st.sampled_from(["0", "3", "7", "a,b", "w0,w1,w2,w3", "tpu"]),
        }
    ),
    st.fixed_dictionaries(
        {
            "name": st.just("TPU_WORKER_ID"),
            "valueFrom": st.just({"fieldRef": {"fieldPath": "metadata.labels['x']"}}),
        }
    ),
)
env = st.one_of(st.lists(env_entries, max_size=3), st.just("x"))
containers = st.lists(
    mapping(resources=resources, ports=ports, env=env).map(lambda c: {"name": "c", **c}),
    min_size=1,
    max_size=3,
)
pod_specs = st.builds(
    lambda fields, required: {**fields, **required},
    mapping(
        nodeSelector=selectors,
        initContainers=containers,
        subdomain=st.sampled_from(["svc", "headless-svc"]),
    ),
    st.fixed_dictionaries({"containers": containers}),
)
job_owner = st.fixed_dictionaries(
    {
        "ownerReferences": st.just([{"apiVersion": "batch/v1", "kind": "Job", "name": "j"}]),
        "labels": st.just({"batch.kubernetes.io/job-name": "j"}),
        "annotations": st.sampled_from([{"batch.kubernetes.io/job-completion-index": "2"}, {}]),
    }
)
pods = st.builds(
    lambda meta, spec: {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec},
    st.one_of(
        st.builds(lambda n: {"name": n}, NAMES), job_owner.map(lambda o: {"name": "j-2", **o})
    ),
    pod_specs,
)
counts = st.sampled_from([1, 2, 4, 8, 16])
jobs = st.builds(
    lambda meta, spec, template: {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {**spec, "template": {"spec": template}},
    },
    st.one_of(
        st.builds(lambda n: {"name": n}, NAMES),
        st.builds(lambda n: {"generateName": f"{n}-"}, NAMES),
    ),
    mapping(
        completionMode=st.sampled_from(["Indexed", "NonIndexed"]),
        parallelism=counts,
        completions=counts,
        backoffLimit=st.sampled_from([0, 2]),
    ),
    pod_specs,
)
workloads = st.one_of(pods, jobs)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads)
def test_mutation_only_adds_keeps_every_input_value_and_is_idempotent(obj: dict[str, Any]) -> None:
    workload = workload_of(obj)
    verdict = decide.mutate(obj, workload, CATALOG, OPTIONS)
    result = apply(obj, verdict.patch)
    assert [op["op"] for op in verdict.patch if op["op"] != "add"] == []
    assert overwritten(obj, verdict.patch) == []
    changed = {p: v for p, v in leaves(obj).items() if resolve(result, p) != v}
    assert changed == {}
    assert decide.mutate(result, workload, CATALOG, OPTIONS).patch == ()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads)
def test_validation_of_any_input_and_its_mutation_returns_a_verdict(obj: dict[str, Any]) -> None:
    workload = workload_of(obj)
    result = apply(obj, decide.mutate(obj, workload, CATALOG, OPTIONS).patch)
    for verdict in (
        decide.validate(obj, workload, CATALOG),
        decide.validate(result, workload, CATALOG),
        decide.validate(result, workload, CATALOG, old=obj),
    ):
        found = (*verdict.denials, *verdict.warnings)
        assert [v.message for v in found if not v.message.startswith(f"{v.field}: ")] == []
        assert [v for v in verdict.denials if v.advisory] == []


def tpu_pod(container: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "j-1",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j"}],
            "labels": {"batch.kubernetes.io/job-name": "j"},
            "annotations": {"batch.kubernetes.io/job-completion-index": "1"},
        },
        "spec": {
            "nodeSelector": {ACCELERATOR: "tpu-v5p-slice", TOPOLOGY: "2x2x4"},
            "containers": [{"name": "main", **container}],
        },
    }


# Wrong-typed values inside lists: a port or env name that is a list, a port number that is a map.
# The API server rejects these with its own message; the webhook must neither crash nor rewrite.
UNHASHABLE = {
    "port name is a list": {"ports": [{"name": ["tpu-comm"], "containerPort": 9000}]},
    "port number is a map": {"ports": [{"name": "x", "containerPort": {"port": 8471}}]},
    "env name is a list": {"env": [{"name": ["TPU_WORKER_ID"], "value": "1"}]},
}


@pytest.mark.parametrize("fields", UNHASHABLE.values(), ids=UNHASHABLE.keys())
def test_mutation_never_raises_on_unhashable_values_in_ports_or_env(fields: dict[str, Any]) -> None:
    obj = tpu_pod({"resources": {"requests": {TPU: 4}, "limits": {TPU: 4}}, **fields})
    verdict = decide.mutate(obj, workload_of(obj), CATALOG, OPTIONS)
    assert overwritten(obj, verdict.patch) == []
    assert {op["op"] for op in verdict.patch} <= {"add"}


# Valid quantities that overflow Python's decimal context, use the "Ei" suffix, or are huge
# whole numbers: each must get a verdict (the API server accepts all of them as quantities), and
# the denial must read like a Kubernetes field error: (resource, value, rule, field, value shown).
LIMIT = "spec.containers[0].resources.limits[google.com/tpu]"
EXTREME = [
    (TPU, "1Ei", "tpu.chips-per-host", LIMIT, str(2**60)),
    (
        "memory",
        "1Ei",
        "tpu.resources-exceed-node",
        "spec.containers[0].resources.requests[memory]",
        '"1Ei"',
    ),
    (
        "cpu",
        "1e1000000",
        "tpu.resources-exceed-node",
        "spec.containers[0].resources.requests[cpu]",
        '"1e1000000"',
    ),
    (TPU, "1e1000000", "tpu.quantity-invalid", LIMIT, '"1e1000000"'),
    (TPU, "1e5000", "tpu.quantity-invalid", LIMIT, '"1e5000"'),
]
NOT_PRINTABLE_MARKS = ("Decimal", "Infinity", "inf", "e+", "Traceback", "None", "\\")


@pytest.mark.parametrize(
    ("resource", "value", "code", "field", "shown"),
    EXTREME,
    ids=[f"{r}={v}" for r, v, *_ in EXTREME],
)
def test_extreme_quantities_are_denied_with_a_field_error_a_person_can_read(
    resource: str, value: str, code: str, field: str, shown: str
) -> None:
    amounts = {TPU: 4, resource: value}
    obj = tpu_pod({"resources": {"requests": amounts, "limits": amounts}})
    workload = workload_of(obj)
    result = apply(obj, decide.mutate(obj, workload, CATALOG, OPTIONS).patch)
    denials = decide.validate(result, workload, CATALOG).denials
    (denial,) = [v for v in denials if v.code == code]
    assert str(denial.field) == field
    assert denial.message.startswith(f"{field}: Invalid value: {shown}: ")
    for v in denials:  # every denial reads as a Kubernetes field error
        head, _, detail = v.message.partition(": ")
        assert head == str(v.field)
        assert detail.split(": ", 1)[0] in ("Invalid value", "Required value", "Forbidden")
        assert v.message.isprintable()
        assert len(v.message) <= 500  # the advice, never a huge echo of the value
        assert [mark for mark in NOT_PRINTABLE_MARKS if mark in v.message] == []


def test_a_huge_chip_count_is_judged_in_well_under_a_second() -> None:
    # int(Decimal("1e299999")) alone takes seconds; 1e999999 about 20 s per conversion, and each
    # request converts it twice: a cheap way to tie up the webhook.
    amounts = {TPU: "1e299999"}
    obj = tpu_pod({"resources": {"requests": amounts, "limits": amounts}})
    started = time.perf_counter()
    try:
        decide.validate(obj, workload_of(obj), CATALOG)
    finally:
        elapsed = time.perf_counter() - started
    assert elapsed < 0.5
