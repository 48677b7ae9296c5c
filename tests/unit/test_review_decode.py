"""One decoder, managedFields skipped: the object the policy gets is the object as sent, without
`metadata.managedFields`, whichever way the body is decoded (webhook/admission/review.py)."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import orjson
import pytest

from bench.corpus import load_corpus
from webhook.admission.review import OBJECTS_MAX_BYTES, _Metadata, parse_review

MANAGED = [
    {
        "manager": "kube-controller-manager",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-12-02T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
    }
]


def review(obj: Any, old: Any = None) -> bytes:
    request = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": obj}
    if old is not None:
        request |= {"operation": "UPDATE", "oldObject": old}
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


def pod(**extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "a"}, "managedFields": MANAGED, **extra},
        "spec": {"containers": [{"name": "m", "image": "i"}]},
        "status": {},
    }


def without_managed(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("managedFields", None)
    return obj


@pytest.mark.parametrize("sent", load_corpus(), ids=lambda r: r.filename)
def test_a_review_of_the_bench_corpus_is_its_object_without_managed_fields(sent: Any) -> None:
    _, request = parse_review(sent.body)
    assert request.object == without_managed(orjson.loads(sent.body)["request"]["object"])
    assert request.object is not None
    assert "managedFields" not in request.object["metadata"]


def test_the_old_object_of_an_update_is_read_the_same_way() -> None:
    _, request = parse_review(review(pod(), pod(uid="x")))
    assert request.object == without_managed(pod())
    assert request.old_object == without_managed(pod(uid="x"))
    assert request.operation == "UPDATE"


@pytest.mark.parametrize(
    "obj",
    [
        {**pod(), "data": {"k": "v"}},  # a top-level key beyond Kubernetes' own
        pod(surprise=1),  # a metadata key ObjectMeta does not have
        {**pod(), "metadata": 5},  # not an object: the policy says what is wrong
    ],
    ids=["top-level-key", "metadata-key", "metadata-not-an-object"],
)
def test_an_object_beyond_kubernetes_own_keys_is_decoded_whole(obj: dict[str, Any]) -> None:
    _, request = parse_review(review(obj))
    assert request.object == obj


def test_managed_fields_of_any_shape_are_skipped_unread() -> None:
    obj = {**pod(), "metadata": {"managedFields": "not a list", "name": "p"}}
    _, request = parse_review(review(obj))
    assert request.object == {**obj, "metadata": {"name": "p"}}


def test_a_large_body_is_decoded_whole_at_once() -> None:
    obj = pod(annotations={"a": "x" * OBJECTS_MAX_BYTES})
    _, request = parse_review(review(obj))
    assert request.object == obj  # managedFields kept: one decode, never two


def test_an_object_that_is_no_object_is_handed_on_as_it_is() -> None:
    for value in (None, [], "pod", 3):
        _, request = parse_review(review(value))
        assert request.object == value


def test_every_field_of_object_meta_is_kept_whatever_its_value() -> None:
    """Every field the decoder declares (a field the copy forgot would be dropped silently)."""
    keys = [
        f.encode_name for f in msgspec.structs.fields(_Metadata) if f.encode_name != "managedFields"
    ]
    assert len(keys) == 14
    values: tuple[Any, ...] = ("v", 0, False, None, [], {})
    for value in values:
        metadata = {key: value for key in keys}
        obj = {**pod(), "metadata": {**metadata, "managedFields": MANAGED}}
        _, request = parse_review(review(obj))
        assert request.object == {**obj, "metadata": metadata}
