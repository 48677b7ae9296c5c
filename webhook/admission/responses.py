"""AdmissionReview responses: allowed, denied with a field-error message, or patched."""

from __future__ import annotations

from binascii import b2a_base64
from typing import Any

import orjson

from webhook.policy.decide import Verdict
from webhook.policy.violations import aggregate


def build_response(api_version: str, uid: str, verdict: Verdict, mode: str) -> dict[str, Any]:
    """The AdmissionReview answer for a verdict; in warn mode denials become warnings."""
    denials, warnings = verdict.denials, verdict.warnings
    if mode == "warn":
        denials, warnings = (), (*denials, *warnings)
    response: dict[str, Any] = {"uid": uid, "allowed": not denials}
    if denials:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": aggregate(denials)}
    elif verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = b2a_base64(orjson.dumps(verdict.patch), newline=False).decode()
    if warnings:
        response["warnings"] = [w.message for w in warnings]
    annotations = _audit_annotations(verdict, mode)
    if annotations:
        response["auditAnnotations"] = annotations
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


def _audit_annotations(verdict: Verdict, mode: str) -> dict[str, str]:
    annotations: dict[str, str] = {}
    if verdict.denials:
        annotations["violations"] = ",".join(sorted({v.code for v in verdict.denials}))
    if verdict.warnings:
        annotations["warnings"] = ",".join(sorted({v.code for v in verdict.warnings}))
    if annotations and mode == "warn":
        annotations["mode"] = "warn"
    if verdict.patch and not verdict.denials:
        annotations["patch-operations"] = str(len(verdict.patch))
    return annotations
