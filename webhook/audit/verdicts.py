"""What tpu-webhook says today of an object already stored in the cluster: pure, over dicts.

A stored object has been through admission (mutated, then validated) when it was created, or it
was created while the webhook was not called (before it was installed, in warn mode, with
`failurePolicy: Ignore` while it was down). So it is judged by the *validating* decision as a
CREATE of the object as it is stored, not by `offline.admit`: admit would first patch in what is
missing and then judge the patched copy, which hides exactly what the audit is for, an object
that runs without its worker variables. What the mutating decision would still add is reported
instead, as findings (`tpu.worker-env-missing`, warnings: the webhook would have added them, it
would not have refused the object; webhook/policy/stored.py says which).

An UPDATE is not what is judged: an audit asks whether the object, as it is, would be admitted
now, not whether a change to it introduces a violation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from webhook.admission.dispatch import Policy
from webhook.policy import decide, stored
from webhook.policy.claims import claim_of
from webhook.policy.context import opted_out
from webhook.policy.podspec import slice_shape
from webhook.policy.violations import Violation
from webhook.policy.workloads import Workload, workload_for

Verdict = Literal["denied", "warned", "admitted", "exempt"]


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    field: str
    message: str  # as kubectl prints a field error: `field: Invalid value: ...: detail`
    denial: bool  # the webhook would refuse the object for it (else a warning)

    def as_json(self) -> dict[str, str]:
        return {"code": self.code, "field": self.field, "message": self.message}


@dataclass(frozen=True, slots=True)
class Audited:
    """One stored TPU workload and what the webhook says of it today."""

    api_version: str
    kind: str
    namespace: str  # "" for a cluster-scoped object
    name: str
    uid: str
    verdict: Verdict
    findings: tuple[Finding, ...] = ()
    asks: tuple[str, ...] = ()  # the TPU shapes it asks for: `tpu-v6e-slice 4x4 (4 hosts...)`

    @property
    def denials(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.denial)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if not f.denial)

    @property
    def codes(self) -> list[str]:
        """Each finding's code once, denials first."""
        ordered = [f.code for f in self.denials] + [f.code for f in self.warnings]
        return list(dict.fromkeys(ordered))

    def as_json(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "verdict": self.verdict,
            "allowed": self.verdict != "denied",
            "asks": list(self.asks),
            "violations": [f.as_json() for f in self.denials],
            "warnings": [f.as_json() for f in self.warnings],
        }


def audit(obj: Mapping[str, Any], policy: Policy) -> Audited | None:
    """The webhook's verdict today on a stored object; None when it is no TPU workload (no TPU
    pod template, no TPU claim, no finding) or a kind the webhook does not decide."""
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    workload = workload_for(group, str(obj.get("kind", "")))
    if workload is None:
        return None
    meta = _mapping(obj.get("metadata"))
    namespace = str(meta.get("namespace") or "")
    options = policy.options_in(namespace)
    view = policy.cluster.view
    sites = decide.tpu_sites(obj, workload)
    if sites and decide.claims_maybe(sites):
        sites = decide.with_claims(obj, sites, policy.catalog, view)
    tpu = bool(sites) or _tpu_claim(obj, workload, policy)
    if tpu and opted_out(obj, options.exemptions):
        return _audited(obj, workload, "exempt", (), ())
    validated = decide.validate(obj, workload, policy.catalog, None, options, view)
    mutated = decide.mutate(obj, workload, policy.catalog, options, view)
    findings = (
        *(_finding(v, denial=True) for v in validated.denials),
        *(_finding(v, denial=False) for v in validated.warnings),
        *(_finding(v, denial=False) for v in stored.missing(mutated.patch)),
    )
    if not tpu and not findings:
        return None
    asks = tuple(dict.fromkeys(_asks(t, policy) for _, t in sites))
    verdict: Verdict = "denied" if validated.denials else "warned" if findings else "admitted"
    return _audited(obj, workload, verdict, findings, asks)


def _asks(tpu: Any, policy: Policy) -> str:
    shape = slice_shape(tpu, policy.catalog)
    if shape is not None:
        return f"{shape.accelerator} {shape.describe()}"
    accelerator = tpu.accelerator_value if isinstance(tpu.accelerator_value, str) else "?"
    topology = tpu.topology if isinstance(tpu.topology, str) else "?"
    return f"{accelerator} {topology}"


def _tpu_claim(obj: Mapping[str, Any], workload: Workload, policy: Policy) -> bool:
    dra = policy.catalog.dra
    if not workload.claim or dra is None:
        return False
    claim = claim_of(obj, dra.device_classes | policy.cluster.view.tpu_device_classes)
    return claim is not None and bool(claim.requests)


def _finding(v: Violation, *, denial: bool) -> Finding:
    return Finding(v.code, str(v.field), v.message, denial)


def _audited(
    obj: Mapping[str, Any],
    workload: Workload,
    verdict: Verdict,
    findings: tuple[Finding, ...],
    asks: tuple[str, ...],
) -> Audited:
    meta = _mapping(obj.get("metadata"))
    return Audited(
        str(obj.get("apiVersion") or f"{workload.group}/{workload.version}".lstrip("/")),
        workload.kind,
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        verdict,
        findings,
        asks,
    )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}
