"""Mutating and Validating WebhookConfigurations for `url` mode (local clusters, e2e tests).

The chart renders the same shape with `service:` client configs.
"""

from __future__ import annotations

from typing import Any

from webhook.catalog.tpu import ACCELERATOR_LABEL, OPT_OUT_LABEL, TOPOLOGY_LABEL, TPU_RESOURCE
from webhook.policy.workloads import EACH, WORKLOADS

MODE_LABEL = "tpu-webhook.io/mode"


def tpu_match_expression() -> str:
    """CEL that is true only for objects whose pod spec names a TPU selector or requests chips.

    Derived from the workload table, so a new kind there is a new branch here. Every step is
    guarded with has(): an evaluation error counts as a webhook failure. The chart ships this
    text as files/tpu-workload.cel (`make chart-cel`; a test keeps the two identical).
    """
    by_spec: dict[tuple[tuple[str, ...], ...], list[str]] = {}
    for workload in WORKLOADS.values():
        paths = workload.pod_spec_paths
        by_spec.setdefault(paths, []).append(workload.kind)
    branches = ""
    for paths, kinds in by_spec.items():
        specs = " + ".join(_cel_specs("object", path) for path in paths)
        test = " || ".join(f"request.kind.kind == '{kind}'" for kind in kinds)
        branches += f"({test})\n  ? {specs}\n  : "
    wants = (
        f"has(c.resources)\n"
        f"    && ((has(c.resources.requests) && '{TPU_RESOURCE}' in c.resources.requests)\n"
        f"        || (has(c.resources.limits) && '{TPU_RESOURCE}' in c.resources.limits))"
    )
    return (
        f"({branches}[]\n).exists(s,\n"
        f"  (has(s.nodeSelector)\n"
        f"    && ('{ACCELERATOR_LABEL}' in s.nodeSelector\n"
        f"        || '{TOPOLOGY_LABEL}' in s.nodeSelector))\n"
        f"  || ((has(s.containers) ? s.containers : [])\n"
        f"      + (has(s.initContainers) ? s.initContainers : [])).exists(c,\n"
        f"    {wants}))"
    )


def _cel_specs(base: str, path: tuple[str, ...]) -> str:
    """A CEL list of the pod specs at `path` under `base`; a `*` step maps a list's items."""

    def guarded(root: str, steps: tuple[str, ...]) -> str:
        return " && ".join(f"has({'.'.join((root, *steps[: i + 1]))})" for i in range(len(steps)))

    if EACH not in path:
        return f"({guarded(base, path)} ? [{'.'.join((base, *path))}] : [])"
    at = path.index(EACH)
    head, tail = path[:at], path[at + 1 :]
    if EACH in tail:
        raise ValueError(f"one list step per pod spec path: {path}")
    items = ".".join((base, *head))
    return (
        f"({guarded(base, head)}\n      ? {items}.filter(i, {guarded('i', tail)})"
        f".map(i, {'.'.join(('i', *tail))})\n      : [])"
    )


def _rules(operations: list[str]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[str]] = {}
    for workload in WORKLOADS.values():
        groups.setdefault((workload.group, workload.version), []).append(workload.resource)
    return [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "resources": sorted(resources),
            "operations": operations,
            "scope": "Namespaced",
        }
        for (group, version), resources in groups.items()
    ]


def url_webhook_configurations(
    base_url: str,
    ca_bundle: str,
    name: str = "tpu-webhook",
    match_conditions: bool = True,
    exclude_namespaces: tuple[str, ...] = ("kube-system",),
    failure_policy: str = "Fail",
    timeout_seconds: int = 5,
) -> list[dict[str, Any]]:
    """A MutatingWebhookConfiguration and a ValidatingWebhookConfiguration (enforce + warn)."""

    def webhook(hook: str, path: str, operations: list[str], mode: str) -> dict[str, Any]:
        in_warn = {
            "key": MODE_LABEL,
            "operator": "In" if mode == "warn" else "NotIn",
            "values": ["warn"],
        }
        selector: list[dict[str, Any]] = [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": list(exclude_namespaces),
            },
            {"key": OPT_OUT_LABEL, "operator": "NotIn", "values": ["true"]},
        ]
        if mode != "any":
            selector.append(in_warn)
        entry: dict[str, Any] = {
            "name": hook,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": failure_policy,
            "timeoutSeconds": timeout_seconds,
            "clientConfig": {"url": base_url.rstrip("/") + path, "caBundle": ca_bundle},
            "rules": _rules(operations),
            "namespaceSelector": {"matchExpressions": selector},
            "objectSelector": {
                "matchExpressions": [
                    {"key": OPT_OUT_LABEL, "operator": "NotIn", "values": ["true"]}
                ]
            },
        }
        if match_conditions:
            entry["matchConditions"] = [
                {"name": "tpu-workload", "expression": tpu_match_expression()}
            ]
        return entry

    mutating = webhook(f"mutate.{name}.io", "/mutate", ["CREATE"], "any")
    mutating["reinvocationPolicy"] = "IfNeeded"
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [mutating],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                webhook(f"validate.{name}.io", "/validate", ["CREATE", "UPDATE"], "enforce"),
                webhook(f"validate-warn.{name}.io", "/validate/warn", ["CREATE", "UPDATE"], "warn"),
            ],
        },
    ]
