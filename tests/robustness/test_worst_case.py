"""The worst-case hunt: no input up to the body cap makes a review's decision expensive.

Every shape of bench/worst.py (each grown to the 3 MiB cap along the count that makes its part of
the policy work: containers, env entries, templates, affinity terms, a value's length...), and
Hypothesis mixing those counts at random up to the cap, are decided in process as the server's
large-review path decides them (the collector paused). Each decision is bounded relative to the
decode of its own body: a decode is linear in C, so a decision that is not linear with a small
constant (the quadratic edit distance on a 10,000-character label took 30 s; 40,000 containers'
violations took a second) fails here, on any machine. The answer is bounded too.
"""

from __future__ import annotations

import gc
import time

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bench.worst import CAP, SHAPES, V6E_4X4, Cost, container, grow, measure, review
from tests.robustness.conftest import PROPERTY_EXAMPLES
from webhook.admission.dispatch import Policy, review_request
from webhook.admission.responses import build_response
from webhook.admission.review import parse_review_prefiltered
from webhook.catalog import load_catalog
from webhook.policy.bounds import MAX_FINDINGS

POLICY = Policy(load_catalog())
MAX_ANSWER_BYTES = 64 * 1024  # MAX_FINDINGS messages of at most 1 KiB, or a bounded patch
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def within_bounds(cost: Cost) -> None:
    """The decision (and the answer) costs no more than a decode of the same body, plus 25 ms
    (a 3 MiB decode is 15-60 ms here); the answer stays small whatever the input."""
    assert cost.decide_ms + cost.answer_ms <= 25 + cost.decode_ms, cost
    assert cost.answer_bytes <= MAX_ANSWER_BYTES, cost


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_a_shape_grown_to_the_cap_is_decided_in_bounded_time(shape: str, endpoint: str) -> None:
    body, n = grow(SHAPES[shape])
    assert CAP - 64 * 1024 < len(body) <= CAP  # as large as the server accepts
    best = min((measure(shape, body, n, POLICY, endpoint) for _ in range(3)), key=_total)
    within_bounds(best)


def _total(cost: Cost) -> float:
    return cost.decide_ms + cost.answer_ms - cost.decode_ms


def test_a_decision_with_the_collector_on_is_bounded_too() -> None:
    """Small reviews are decided inline, with the collector on: even on the largest shape the
    decision allocates too little for a collection to matter."""
    body, n = grow(SHAPES["containers-wrong-chips"])
    measured = measure("containers-wrong-chips", body, n, POLICY, "validate")
    _, request = parse_review_prefiltered(body)
    gc.collect()
    started = time.perf_counter()
    review_request(request, "validate", POLICY)
    assert (time.perf_counter() - started) * 1000 <= 25 + measured.decode_ms


def test_the_denial_of_many_violations_is_capped_and_says_how_many_more() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"nodeSelector": V6E_4X4, "containers": [container(i, "3") for i in range(40)]},
    }
    _, request = parse_review_prefiltered(orjson.dumps(review(obj, "Pod")))
    verdict = review_request(request, "validate", POLICY)
    answer = build_response("admission.k8s.io/v1", "u", verdict, "enforce")["response"]
    message = answer["status"]["message"]
    assert len(verdict.denials) == 79  # 40 chip counts, 39 extra TPU containers
    assert message.startswith("[spec.containers[0].resources.limits[google.com/tpu]: ")
    assert message.endswith(f", and {79 - MAX_FINDINGS} more]")
    assert message.count(", spec.containers[") == MAX_FINDINGS - 1


# ---- Hypothesis: the counts mixed at random, up to the cap ----------------------------------


@st.composite
def hostile_jobs(draw: st.DrawFn) -> bytes:
    """A Job (or its Pod) mixing every count at once: templates are not the Job's, but
    containers, env entries, ports, affinity terms and long values are."""
    containers = draw(st.integers(min_value=1, max_value=2_000))
    env = draw(st.integers(min_value=0, max_value=20_000 // containers))
    terms = draw(st.integers(min_value=0, max_value=2_000))
    value_length = draw(st.sampled_from([1, 63, 64, 1_000, 100_000]))
    chips = draw(st.sampled_from(["4", "3", "1.5", "9" * value_length, "x" * value_length]))
    variable = draw(
        st.sampled_from(["TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "MEGASCALE_SLICE_ID"])
    )
    selector = dict(V6E_4X4)
    if draw(st.booleans()):
        selector["cloud.google.com/gke-tpu-accelerator"] = "tpu-v6e-slicf" + "e" * value_length
    spec = {
        "nodeSelector": selector,
        "containers": [
            container(i, chips, env=[{"name": variable, "value": "a," * 8}] * env)
            for i in range(containers)
        ],
    }
    if terms:
        expression = {
            "key": "cloud.google.com/gke-tpu-topology",
            "operator": "In",
            "values": ["4x4"],
        }
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expression]}] * terms
                }
            }
        }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": draw(st.sampled_from(["train", "t" * value_length]))},
        "spec": {"completionMode": "Indexed", "parallelism": 2, "template": {"spec": spec}},
    }
    body = orjson.dumps(review(job, "Job", "batch"))
    assume(len(body) <= CAP)
    return body


@settings(
    max_examples=max(10, PROPERTY_EXAMPLES // 5),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(body=hostile_jobs(), endpoint=st.sampled_from(["mutate", "validate"]))
def test_any_mix_of_counts_up_to_the_cap_is_decided_in_bounded_time(
    body: bytes, endpoint: str
) -> None:
    within_bounds(measure("hypothesis", body, 0, POLICY, endpoint))
