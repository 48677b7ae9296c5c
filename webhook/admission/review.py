"""The AdmissionReview envelope, parsed with msgspec; the object itself stays a plain dict.

One decoder: the server and the CLI hand the policy the whole object as sent, but for
`metadata.managedFields`: the API server's record of who set which field, which no rule reads and
which is a third to a half of a controller's Pod, is skipped undecoded (an object with a top-level
or metadata key beyond Kubernetes' own is decoded whole instead). A body without a TPU marker is
the one exception: its object cannot be a TPU workload, so it is left undecoded and allowed (most
Pods of a cluster).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from webhook.admission.trigger import WHOLE_KINDS, may_be_tpu

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


class ReviewError(ValueError):
    """Not a usable AdmissionReview: the server answers HTTP 400 with this message."""


class GroupVersionKind(msgspec.Struct, frozen=True):
    group: str = ""
    version: str = ""
    kind: str = ""


class Request(msgspec.Struct, frozen=True, rename="camel"):
    uid: str
    kind: GroupVersionKind = GroupVersionKind()
    operation: str = "CREATE"
    namespace: str = ""
    name: str = ""
    object: Any = None
    old_object: Any = None
    dry_run: bool | None = None


class Review(msgspec.Struct, frozen=True, rename="camel"):
    api_version: str = ""
    kind: str = ""
    request: Request | None = None


_decoder = msgspec.json.Decoder(Review)


class _Metadata(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """ObjectMeta as the API server sends it (it prunes what is not a field of it), values
    untyped as in a dict, managedFields left undecoded."""

    name: Any | UnsetType = UNSET
    generate_name: Any | UnsetType = UNSET
    namespace: Any | UnsetType = UNSET
    self_link: Any | UnsetType = UNSET
    uid: Any | UnsetType = UNSET
    resource_version: Any | UnsetType = UNSET
    generation: Any | UnsetType = UNSET
    creation_timestamp: Any | UnsetType = UNSET
    deletion_timestamp: Any | UnsetType = UNSET
    deletion_grace_period_seconds: Any | UnsetType = UNSET
    labels: Any | UnsetType = UNSET
    annotations: Any | UnsetType = UNSET
    owner_references: Any | UnsetType = UNSET
    finalizers: Any | UnsetType = UNSET
    managed_fields: msgspec.Raw | UnsetType = UNSET


class _Object(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """A Kubernetes object of the kinds reviewed: these keys and no others, else decoded whole."""

    api_version: Any | UnsetType = UNSET
    kind: Any | UnsetType = UNSET
    metadata: _Metadata | UnsetType = UNSET
    spec: Any | UnsetType = UNSET
    status: Any | UnsetType = UNSET


class _ObjectsRequest(Request, frozen=True, rename="camel"):
    object: _Object | None = None
    old_object: _Object | None = None


class _ObjectsReview(Review, frozen=True, rename="camel"):
    request: _ObjectsRequest | None = None


_objects = msgspec.json.Decoder(_ObjectsReview)
# Larger bodies are decoded whole at once: a typed decode that fails late would decode twice.
OBJECTS_MAX_BYTES = 64 * 1024


def parse_review(body: bytes) -> tuple[str, Request]:
    """(apiVersion, request) of an AdmissionReview body, or ReviewError saying what is wrong."""
    if len(body) <= OBJECTS_MAX_BYTES:
        try:
            typed = _objects.decode(body)
        except (msgspec.DecodeError, RecursionError):
            pass  # an unusual object, or not a review: decoded whole, the errors worded there
        else:
            api_version, request = _checked(typed)
            return api_version, _plain_request(request)
    try:
        review = _decoder.decode(body)
    except msgspec.DecodeError as error:
        raise ReviewError(_short(error)) from None
    except RecursionError:
        raise ReviewError("invalid AdmissionReview: nested too deeply") from None
    return _checked(review)


def _plain_request(typed: Request) -> Request:
    """The request with its objects as plain dicts (managedFields left out)."""
    assert isinstance(typed, _ObjectsRequest)
    return Request(
        typed.uid,
        typed.kind,
        typed.operation,
        typed.namespace,
        typed.name,
        _plain(typed.object),
        _plain(typed.old_object),
        typed.dry_run,
    )


def _plain(obj: _Object | None) -> dict[str, Any] | None:
    if obj is None:
        return None
    plain: dict[str, Any] = {}
    if obj.api_version is not UNSET:
        plain["apiVersion"] = obj.api_version
    if obj.kind is not UNSET:
        plain["kind"] = obj.kind
    if obj.metadata is not UNSET:
        plain["metadata"] = _metadata(obj.metadata)
    if obj.spec is not UNSET:
        plain["spec"] = obj.spec
    if obj.status is not UNSET:
        plain["status"] = obj.status
    return plain


def _metadata(meta: _Metadata) -> dict[str, Any]:
    """The fields of ObjectMeta that are set, managedFields left out. One read per field: a loop
    over the fields costs three times as much (tests/unit/test_review.py keeps the two lists
    in step)."""
    plain: dict[str, Any] = {}
    if (value := meta.name) is not UNSET:
        plain["name"] = value
    if (value := meta.generate_name) is not UNSET:
        plain["generateName"] = value
    if (value := meta.namespace) is not UNSET:
        plain["namespace"] = value
    if (value := meta.self_link) is not UNSET:
        plain["selfLink"] = value
    if (value := meta.uid) is not UNSET:
        plain["uid"] = value
    if (value := meta.resource_version) is not UNSET:
        plain["resourceVersion"] = value
    if (value := meta.generation) is not UNSET:
        plain["generation"] = value
    if (value := meta.creation_timestamp) is not UNSET:
        plain["creationTimestamp"] = value
    if (value := meta.deletion_timestamp) is not UNSET:
        plain["deletionTimestamp"] = value
    if (value := meta.deletion_grace_period_seconds) is not UNSET:
        plain["deletionGracePeriodSeconds"] = value
    if (value := meta.labels) is not UNSET:
        plain["labels"] = value
    if (value := meta.annotations) is not UNSET:
        plain["annotations"] = value
    if (value := meta.owner_references) is not UNSET:
        plain["ownerReferences"] = value
    if (value := meta.finalizers) is not UNSET:
        plain["finalizers"] = value
    return plain


def _checked(review: Review) -> tuple[str, Request]:
    if review.kind != "AdmissionReview" or review.api_version not in API_VERSIONS:
        raise ReviewError(
            f"expected kind AdmissionReview, apiVersion one of {', '.join(API_VERSIONS)}; "
            f"got kind {review.kind[:64]!r}, apiVersion {review.api_version[:64]!r}"
        )
    if review.request is None:
        raise ReviewError("AdmissionReview has no request")
    return review.api_version, review.request


def _short(error: msgspec.DecodeError) -> str:
    text = str(error)
    return ("invalid AdmissionReview: " + text)[:300]


class _EnvelopeRequest(Request, frozen=True, rename="camel"):
    object: msgspec.Raw = msgspec.Raw(b"null")
    old_object: msgspec.Raw = msgspec.Raw(b"null")


class _Envelope(Review, frozen=True, rename="camel"):
    request: _EnvelopeRequest | None = None


_envelope = msgspec.json.Decoder(_Envelope)


def parse_review_prefiltered(body: bytes) -> tuple[str, Request]:
    """parse_review, except that a body with no TPU marker has its objects left undecoded,
    unless its kind is one decided whole (TrainJob, PathwaysJob, the DRA claims): its
    `request.object` is then the object's bytes (msgspec.Raw), not a dict, which review_request
    allows."""
    if may_be_tpu(body):
        return parse_review(body)
    try:
        review = _envelope.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return parse_review(body)  # the full parser words the error
    api_version, request = _checked(review)
    if request.kind.kind in WHOLE_KINDS:
        return parse_review(body)
    return api_version, request
