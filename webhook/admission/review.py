"""The AdmissionReview envelope, parsed with msgspec; the object itself stays a plain dict.

One decoder: the server and the CLI hand the policy the whole object as sent. A body without a
TPU marker is the one exception: its object cannot be a TPU workload, so it is left undecoded and
allowed (most Pods of a cluster).
"""

from __future__ import annotations

from typing import Any

import msgspec

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


def parse_review(body: bytes) -> tuple[str, Request]:
    """(apiVersion, request) of an AdmissionReview body, or ReviewError saying what is wrong."""
    try:
        review = _decoder.decode(body)
    except msgspec.DecodeError as error:
        raise ReviewError(_short(error)) from None
    except RecursionError:
        raise ReviewError("invalid AdmissionReview: nested too deeply") from None
    return _checked(review)


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


def parse_review_prefiltered(body: bytes) -> tuple[str, Request, bool]:
    """(apiVersion, request, may_be_tpu): parse_review, except that a body with no TPU marker
    has its object left undecoded (`request.object` is then not the object: allow it), unless
    its kind is one decided whole (TrainJob, PathwaysJob, the DRA claims)."""
    if may_be_tpu(body):
        return (*parse_review(body), True)
    try:
        review = _envelope.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return (*parse_review(body), True)  # the full parser words the error
    api_version, request = _checked(review)
    if request.kind.kind in WHOLE_KINDS:
        return (*parse_review(body), True)
    return api_version, request, False
