"""The request path reads a created object as the policy's view of it (metadata without
managedFields, and the spec): for every case file, the view decides exactly as the whole object.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.unit import workload_of
from tests.unit.test_cases import CATALOG, MUTATE, VALIDATE
from webhook.admission.dispatch import Policy, review_request
from webhook.admission.review import parse_review, parse_review_fast
from webhook.policy.decide import ALLOW

POLICY = Policy(CATALOG)
MANAGED = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {".": {}}}}]


def review(obj: dict[str, Any], old: Any, operation: str) -> bytes:
    workload = workload_of(obj)
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    with_managed = {**obj, "metadata": {**obj.get("metadata", {}), "managedFields": MANAGED}}
    request = {
        "uid": "7c1f4ab9-0000-4000-8000-000000000001",
        "kind": {"group": group, "version": version, "kind": workload.kind},
        "operation": operation,
        "namespace": "default",
        "object": with_managed,
        "oldObject": old,
    }
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


@pytest.mark.parametrize("case", VALIDATE + MUTATE, ids=lambda c: f"{c['file']}: {c['name']}")
@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_the_view_decides_as_the_whole_object(case: dict[str, Any], endpoint: str) -> None:
    old = case.get("oldObject")
    body = review(case["object"], old, "UPDATE" if old else "CREATE")
    _, whole = parse_review(body)
    _, view, may_be_tpu = parse_review_fast(body)
    # as the server answers: a body without a TPU marker is allowed without a decision
    answered = review_request(view, endpoint, POLICY) if may_be_tpu else ALLOW
    assert answered == review_request(whole, endpoint, POLICY)


def test_the_view_has_no_managed_fields() -> None:
    case = next(
        c for c in MUTATE if c["object"]["kind"] == "Job" and b"google.com/tpu" in orjson.dumps(c)
    )
    _, view, may_be_tpu = parse_review_fast(review(case["object"], None, "CREATE"))
    assert may_be_tpu
    assert set(view.object) == {"metadata", "spec"}
    assert "managedFields" not in view.object["metadata"]
    assert view.object["spec"] == case["object"]["spec"]


def body_of(obj: Any) -> bytes:
    request = {"uid": "u", "kind": {"kind": "Pod", "version": "v1"}, "object": obj}
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


@pytest.mark.parametrize(
    "obj",
    [
        {
            "metadata": ["a list"],
            "spec": {"nodeSelector": {"cloud.google.com/gke-tpu-topology": 1}},
        },
        ["not", "an", "object", "google.com/tpu"],
        "google.com/tpu",
    ],
)
def test_objects_of_unexpected_shape_are_read_whole(obj: Any) -> None:
    _, view, _ = parse_review_fast(body_of(obj))
    assert view.object == obj


def test_null_metadata_reads_as_none() -> None:
    obj = {
        "metadata": None,
        "spec": {"containers": [{"resources": {"limits": {"google.com/tpu": 4}}}]},
    }
    _, view, _ = parse_review_fast(body_of(obj))
    _, whole = parse_review(body_of(obj))
    assert view.object == {"spec": obj["spec"]}
    for endpoint in ("mutate", "validate"):
        assert review_request(view, endpoint, POLICY) == review_request(whole, endpoint, POLICY)
