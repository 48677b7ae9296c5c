"""The TPU trigger three ways: the policy's own test (read_tpu_spec), the server's byte pre-filter
(`may_be_tpu`) and the API server's CEL filter (built from the same names). The pre-filter must
never skip a review the policy would act on; the names the CEL tests must be the policy's."""

from __future__ import annotations

from typing import Any, get_args

import orjson
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_cases import CATALOG, MUTATE, VALIDATE
from webhook.admission.dispatch import Endpoint, Policy, review_request
from webhook.admission.review import GroupVersionKind, Request, parse_review_prefiltered
from webhook.admission.trigger import (
    AFFINITY_TERMS,
    CONTAINER_LISTS,
    TPU_MARKERS,
    TPU_RESOURCES,
    TPU_SELECTOR_KEYS,
    may_be_tpu,
)
from webhook.policy.decide import ALLOW, tpu_sites
from webhook.policy.workloads import workload_for
from webhook.registration import tpu_match_expression

POD = workload_for("", "Pod")
POLICY = Policy(CATALOG)
ENDPOINTS = get_args(Endpoint)
OTHER_KEYS = ["kubernetes.io/arch", "cloud.google.com/gke-nodepool", "tpu", "gke-tpu"]
OTHER_RESOURCES = ["cpu", "nvidia.com/gpu", "google.com/tp", "tpu"]


def review_body(obj: Any) -> bytes:
    """A review of `obj` as the API server sends it (its kind in the request)."""
    group, _, version = str(obj.get("apiVersion", "v1")).rpartition("/")
    kind = {"group": group, "version": version, "kind": obj.get("kind", "Pod")}
    request = {"uid": "u", "kind": kind, "object": obj}
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


resources = st.dictionaries(
    st.sampled_from([*TPU_RESOURCES, *OTHER_RESOURCES]), st.sampled_from(["4", 8, "1Gi"])
)
container = st.fixed_dictionaries(
    {"name": st.just("c")},
    optional={
        "resources": st.fixed_dictionaries(
            {}, optional={"requests": resources, "limits": resources}
        )
    },
)
expression = st.fixed_dictionaries(
    {
        "key": st.sampled_from([*TPU_SELECTOR_KEYS, *OTHER_KEYS]),
        "operator": st.just("In"),
        "values": st.just(["x"]),
    }
)
terms = st.lists(
    st.fixed_dictionaries({}, optional={"matchExpressions": st.lists(expression, max_size=2)}),
    max_size=2,
)


def nest(path: tuple[str, ...], value: object) -> object:
    for name in reversed(path):
        value = {name: value}
    return value


pod_spec = st.fixed_dictionaries(
    {},
    optional={
        "nodeSelector": st.dictionaries(
            st.sampled_from([*TPU_SELECTOR_KEYS, *OTHER_KEYS]), st.sampled_from(["2x4", "x"])
        ),
        AFFINITY_TERMS[0]: terms.map(lambda t: nest(AFFINITY_TERMS[1:], t)),
        **{name: st.lists(container, max_size=3) for name in CONTAINER_LISTS},
    },
)


def by_the_names(spec: dict[str, Any]) -> bool:
    """The trigger as the CEL filter states it, over the same names."""
    if any(key in spec.get("nodeSelector", {}) for key in TPU_SELECTOR_KEYS):
        return True
    found: Any = spec
    for name in AFFINITY_TERMS:
        found = found.get(name, {}) if isinstance(found, dict) else {}
    for term in found or []:
        if any(e["key"] in TPU_SELECTOR_KEYS for e in term.get("matchExpressions", [])):
            return True
    return any(
        resource in c.get("resources", {}).get(which, {})
        for name in CONTAINER_LISTS
        for c in spec.get(name, [])
        for which in ("requests", "limits")
        for resource in TPU_RESOURCES
    )


@given(pod_spec)
def test_the_policy_and_the_filters_agree_on_what_is_a_tpu_workload(spec: dict[str, Any]) -> None:
    assert POD is not None
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    is_tpu = tpu_sites(obj, POD) != []
    assert is_tpu == by_the_names(spec)
    if is_tpu:
        assert may_be_tpu(review_body(obj)), "the pre-filter would skip a TPU workload"


def test_the_cel_filter_tests_exactly_the_trigger_names() -> None:
    expression = tpu_match_expression()
    for name in (*TPU_SELECTOR_KEYS, *TPU_RESOURCES):
        assert f"'{name}' in " in expression
    for name in CONTAINER_LISTS:
        assert f"has(s.{name})" in expression
    assert f"s.{'.'.join(AFFINITY_TERMS)}.exists(t, " in expression


def test_no_case_the_policy_acts_on_is_skipped_by_the_pre_filter() -> None:
    acted = 0
    for case in VALIDATE + MUTATE:
        obj = case["object"]
        body = review_body(obj)
        group, _, version = str(obj["apiVersion"]).rpartition("/")
        request = Request(uid="u", kind=GroupVersionKind(group, version, obj["kind"]), object=obj)
        verdicts = [review_request(request, e, POLICY) for e in ENDPOINTS]
        if any(v != ALLOW for v in verdicts):
            acted += 1
            _, parsed = parse_review_prefiltered(body)
            assert isinstance(parsed.object, dict), case["name"]
            assert [review_request(parsed, e, POLICY) for e in ENDPOINTS] == verdicts, case["name"]
    assert acted > 50


def test_a_review_without_a_marker_is_allowed_with_its_object_undecoded() -> None:
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}
    _, parsed = parse_review_prefiltered(review_body(plain))
    assert not isinstance(parsed.object, dict)
    assert [review_request(parsed, e, POLICY) for e in ENDPOINTS] == [ALLOW, ALLOW]


def test_markers_at_the_edges_of_the_body() -> None:
    for marker in TPU_MARKERS:
        assert may_be_tpu(marker)
        assert may_be_tpu(b"{" + marker)
        assert not may_be_tpu(marker[:-1])
        assert not may_be_tpu(marker[1:])
    assert not may_be_tpu(b"tpu-job tpu gke-tpu google.com tpu")
