"""AdmissionReview responses: allowed, denied with a field-error message, or patched.

Modes: `enforce` answers a verdict as it is; `warn` (namespaces that asked for advice only)
answers every denial as a warning. `in_mode` is the one place that says so: the response, the
metrics and the review log all read the verdict it returns.
"""

from __future__ import annotations

from binascii import b2a_base64
from collections.abc import Sequence
from typing import Any, Literal

import orjson

from webhook.policy.bounds import MAX_FINDINGS
from webhook.policy.decide import Verdict
from webhook.policy.violations import Violation, aggregate

#: the modes above
Mode = Literal["enforce", "warn"]


def in_mode(verdict: Verdict, mode: Mode) -> Verdict:
    """The verdict as answered in `mode`: in warn mode denials become warnings."""
    if mode != "warn" or not verdict.denials:
        return verdict
    return Verdict(warnings=(*verdict.denials, *verdict.warnings), patch=verdict.patch)


def outcome(answered: Verdict) -> str:
    """denied, warned, patched or allowed: what the API server was told (a verdict `in_mode`)."""
    if answered.denials:
        return "denied"
    if answered.warnings:
        return "warned"
    return "patched" if answered.patch else "allowed"


def build_response(api_version: str, uid: str, verdict: Verdict, mode: Mode) -> dict[str, Any]:
    """The AdmissionReview answer for a verdict in a mode."""
    answered = in_mode(verdict, mode) if mode == "warn" else verdict
    response: dict[str, Any] = {"uid": uid, "allowed": not answered.denials}
    if answered.denials:
        message = aggregate(answered.denials)
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message}
    elif answered.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = b2a_base64(orjson.dumps(answered.patch), newline=False).decode()
    if answered.warnings:
        response["warnings"] = warnings(answered.warnings)
    annotations = _audit_annotations(verdict, mode)
    if annotations:
        response["auditAnnotations"] = annotations
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


def warnings(found: Sequence[Violation]) -> list[str]:
    """The warnings' messages: at most MAX_FINDINGS, then one saying how many more."""
    messages = [w.message for w in found[:MAX_FINDINGS]]
    if len(found) > MAX_FINDINGS:
        messages.append(f"and {len(found) - MAX_FINDINGS} more warnings")
    return messages


def _audit_annotations(verdict: Verdict, mode: Mode) -> dict[str, str]:
    """The rule codes as found: a denial stays a `violation` when warn mode answered it as a
    warning, and `mode: warn` says so."""
    annotations: dict[str, str] = {}
    if verdict.denials:
        annotations["violations"] = _joined(verdict.denials)
    if verdict.warnings:
        annotations["warnings"] = _joined(verdict.warnings)
    if annotations and mode == "warn":
        annotations["mode"] = "warn"
    if verdict.patch and not verdict.denials:
        annotations["patch-operations"] = str(len(verdict.patch))
    return annotations


def _joined(found: Sequence[Violation]) -> str:
    """The findings' rule codes, sorted, each once, comma-separated."""
    if len(found) == 1:
        return found[0].code  # most reviews: no set, no sort
    return ",".join(sorted({v.code for v in found}))
