"""The AdmissionReview envelope, parsed with msgspec; the object itself stays a plain dict.

On the request path (`parse_review_fast`) the object is the part the policy reads: its metadata
without managedFields (about a third of a created object, and of the time to decode it) and its
spec, as plain dicts. `parse_review` keeps the whole object.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

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


def parse_review(body: bytes) -> tuple[str, Request]:
    """(apiVersion, request) of an AdmissionReview body, or ReviewError saying what is wrong."""
    try:
        review = _decoder.decode(body)
    except msgspec.DecodeError as error:
        raise ReviewError(_short(error)) from None
    except RecursionError:
        raise ReviewError("invalid AdmissionReview: nested too deeply") from None
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
# The API server serialises objects with Go's encoding/json, which escapes only <, >, &, U+2028,
# U+2029 and control characters: a TPU selector or resource always appears literally.
TPU_MARKERS = (b"google.com/tpu", b"gke-tpu-")


_MARKER = re.compile(b"|".join(re.escape(marker) for marker in TPU_MARKERS))


def has_tpu_marker(body: bytes) -> bool:
    """Whether a marker appears: one regex scan for both (two `in` scans cost half as much
    again on a body that has neither, and a scan for their common `tpu` stops at every name that
    has it)."""
    return _MARKER.search(body) is not None


class _Metadata(msgspec.Struct, rename="camel"):
    """The metadata fields any rule or the review log reads: add one here when a rule reads it."""

    name: Any = msgspec.UNSET
    generate_name: Any = msgspec.UNSET
    namespace: Any = msgspec.UNSET
    labels: Any = msgspec.UNSET
    annotations: Any = msgspec.UNSET
    owner_references: Any = msgspec.UNSET


class _Object(msgspec.Struct):
    metadata: _Metadata | None = None
    spec: Any = msgspec.UNSET


class _ViewRequest(Request, frozen=True, rename="camel"):
    object: _Object | None = None
    old_object: _Object | None = None


class _ViewReview(Review, frozen=True, rename="camel"):
    request: _ViewRequest | None = None


_view = msgspec.json.Decoder(_ViewReview)
_METADATA = tuple((f.name, f.encode_name) for f in msgspec.structs.fields(_Metadata))


def _plain(view: _Object | None) -> dict[str, Any] | None:
    """The view as the plain dict the policy reads, with only the fields that were sent."""
    if view is None:
        return None
    obj: dict[str, Any] = {}
    if view.metadata is not None:
        metadata = {}
        for attribute, key in _METADATA:
            value = getattr(view.metadata, attribute)
            if value is not msgspec.UNSET:
                metadata[key] = value
        obj["metadata"] = metadata
    if view.spec is not msgspec.UNSET:
        obj["spec"] = view.spec
    return obj


def _parse_view(body: bytes) -> tuple[str, Request]:
    """parse_review, with the object read as the policy's view of it."""
    try:
        review = _view.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return parse_review(body)  # malformed (worded there) or an object of unexpected shape
    found = review.request
    if review.kind != "AdmissionReview" or review.api_version not in API_VERSIONS or not found:
        return parse_review(body)
    request = Request(
        uid=found.uid,
        kind=found.kind,
        operation=found.operation,
        namespace=found.namespace,
        name=found.name,
        object=_plain(found.object),
        old_object=_plain(found.old_object),
        dry_run=found.dry_run,
    )
    return review.api_version, request


def parse_review_fast(body: bytes) -> tuple[str, Request, bool]:
    """(apiVersion, request, may_be_tpu): a body with no TPU marker has its object left undecoded
    (most Pods of a cluster); anything else is read as the policy's view of it."""
    if has_tpu_marker(body):
        return (*_parse_view(body), True)
    try:
        review = _envelope.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return (*parse_review(body), True)  # the full parser words the error
    if review.kind != "AdmissionReview" or review.api_version not in API_VERSIONS:
        return (*parse_review(body), True)
    if review.request is None:
        raise ReviewError("AdmissionReview has no request")
    return review.api_version, review.request, False
