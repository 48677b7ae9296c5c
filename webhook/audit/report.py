"""The audit's PolicyReports (`wgpolicyk8s.io/v1alpha2`, the Policy working group's CRD, which
Kyverno, Policy Reporter and other dashboards read): their bodies and what to write, pure.

One `PolicyReport` named `tpu-webhook` per namespace that holds TPU workloads, and one
`ClusterPolicyReport` for cluster-scoped ones, each labelled
`app.kubernetes.io/managed-by: tpu-webhook`. Each TPU workload gets a result per finding
(`fail`: the webhook would refuse it; `warn`: it would warn), or one `pass` (`skip` when it opted
out). A second audit replaces the reports it wrote (never a second one), keeps the timestamp of
a result that is still there, leaves an unchanged report alone, and deletes the reports of
namespaces left without TPU workloads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from webhook.audit.verdicts import Audited, Finding

GROUP_VERSION = "wgpolicyk8s.io/v1alpha2"
REPORT_NAME = "tpu-webhook"
POLICY = "tpu-webhook"
SOURCE = "tpu-webhook"
CATEGORY = "Cloud TPU"
MANAGED_BY = ("app.kubernetes.io/managed-by", "tpu-webhook")
SELECTOR = "=".join(MANAGED_BY)
# A report is one etcd object (at most 1.5 MiB): results beyond this many are left out, the
# fails first kept; the summary still counts every one.
MAX_RESULTS = 1000
PASS_RULE = "validate"  # a pass: every rule the validating decision applies held
EXEMPT_RULE = "opted-out"
RESULT_ORDER = {"fail": 0, "error": 1, "warn": 2, "skip": 3, "pass": 4}

Write = Literal["create", "replace", "delete"]


@dataclass(frozen=True, slots=True)
class Action:
    write: Write
    path: str
    body: Mapping[str, Any] | None = None  # None for a delete


def path_of(namespace: str, name: str = REPORT_NAME) -> str:
    """The report's API path; a ClusterPolicyReport for namespace ""."""
    if namespace:
        return f"/apis/{GROUP_VERSION}/namespaces/{namespace}/policyreports/{name}"
    return f"/apis/{GROUP_VERSION}/clusterpolicyreports/{name}"


def list_paths(namespace: str | None) -> list[str]:
    """Where the reports of an audit of `namespace` (None: all, the cluster's report too) are."""
    if namespace is not None:
        return [f"/apis/{GROUP_VERSION}/namespaces/{namespace}/policyreports"]
    return [f"/apis/{GROUP_VERSION}/policyreports", f"/apis/{GROUP_VERSION}/clusterpolicyreports"]


def results(audited: Audited, seconds: int) -> list[dict[str, Any]]:
    """The report results of one workload, found at `seconds` (Unix time)."""
    resource = {
        "apiVersion": audited.api_version,
        "kind": audited.kind,
        "name": audited.name,
        "uid": audited.uid,
    }
    if audited.namespace:
        resource["namespace"] = audited.namespace
    base = {"policy": POLICY, "source": SOURCE, "category": CATEGORY, "scored": True}
    base |= {"resources": [resource], "timestamp": {"seconds": seconds, "nanos": 0}}
    if audited.verdict == "exempt":
        message = "labelled tpu-webhook.io/ignore=true: not checked"
        return [base | {"rule": EXEMPT_RULE, "result": "skip", "message": message}]
    if not audited.findings:
        shapes = f" ({'; '.join(audited.asks)})" if audited.asks else ""
        message = f"tpu-webhook admits it as stored{shapes}"
        return [base | {"rule": PASS_RULE, "result": "pass", "message": message}]
    return [base | _finding(f) for f in (*audited.denials, *audited.warnings)]


def _finding(finding: Finding) -> dict[str, Any]:
    return {
        "rule": finding.code,
        "result": "fail" if finding.denial else "warn",
        "severity": "high" if finding.denial else "medium",
        "message": finding.message,
        "properties": {"field": finding.field},
    }


def report(namespace: str, audited: Sequence[Audited], seconds: int) -> dict[str, Any]:
    """The PolicyReport of a namespace (the ClusterPolicyReport for "")."""
    found = [r for a in audited for r in results(a, seconds)]
    summary = {key: 0 for key in ("pass", "fail", "warn", "error", "skip")}
    for result in found:
        summary[result["result"]] += 1
    found.sort(key=lambda r: RESULT_ORDER[r["result"]])  # stable: kubectl's order within
    metadata: dict[str, Any] = {"name": REPORT_NAME, "labels": dict([MANAGED_BY])}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "PolicyReport" if namespace else "ClusterPolicyReport",
        "metadata": metadata,
        "summary": summary,
        "results": found[:MAX_RESULTS],
    }


def reports(audited: Iterable[Audited], seconds: int) -> dict[str, dict[str, Any]]:
    """namespace ("" for cluster-scoped objects) -> its report, for those with TPU workloads."""
    by_namespace: dict[str, list[Audited]] = {}
    for a in audited:
        by_namespace.setdefault(a.namespace, []).append(a)
    return {ns: report(ns, found, seconds) for ns, found in by_namespace.items()}


def plan(
    wanted: Mapping[str, Mapping[str, Any]], existing: Iterable[Mapping[str, Any]]
) -> list[Action]:
    """The writes that make the stored reports `wanted`: `existing` are the reports this audit
    covers (those labelled as ours, of its namespace or of all), as read."""
    actions: list[Action] = []
    stored = {_namespace(r): r for r in existing if _name(r) == REPORT_NAME}
    for namespace, body in sorted(wanted.items()):
        old = stored.get(namespace)
        if old is None:
            actions.append(Action("create", list_paths_for(namespace), body))
            continue
        new = _keep_timestamps(body, old)
        if _content(new) != _content(old):
            version = _mapping(old.get("metadata")).get("resourceVersion", "")
            metadata = {**new["metadata"], "resourceVersion": version}
            actions.append(Action("replace", path_of(namespace), {**new, "metadata": metadata}))
    for namespace in sorted(set(stored) - set(wanted)):
        actions.append(Action("delete", path_of(namespace)))
    return actions


def list_paths_for(namespace: str) -> str:
    """Where a new report of `namespace` is created (POST)."""
    return path_of(namespace).rsplit("/", 1)[0]


def _keep_timestamps(body: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
    """`body` with the timestamp of each result that `old` already had (found then)."""
    first_seen = {
        _key(r): r.get("timestamp") for r in old.get("results") or () if isinstance(r, dict)
    }
    kept = []
    for result in body["results"]:
        seen = first_seen.get(_key(result))
        kept.append(result if seen is None else {**result, "timestamp": seen})
    return {**body, "results": kept}


def _key(result: Mapping[str, Any]) -> str:
    """What makes a result the same one (the API server returns its keys sorted)."""
    kept = [result.get(k) for k in ("rule", "result", "message", "resources")]
    return json.dumps(kept, sort_keys=True)


def _content(report: Mapping[str, Any]) -> tuple[object, object, object]:
    labels = _mapping(report.get("metadata")).get("labels")
    return report.get("summary"), report.get("results") or [], labels


def _namespace(report: Mapping[str, Any]) -> str:
    return str(_mapping(report.get("metadata")).get("namespace") or "")


def _name(report: Mapping[str, Any]) -> str:
    return str(_mapping(report.get("metadata")).get("name") or "")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}
