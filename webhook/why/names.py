"""What `kubectl tpu why NAME` names: a kind of the workload table and a name, as kubectl reads
`TYPE/NAME` (the kind, its plural, `plural.group`, or a short name); a bare name is a Pod."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from webhook.catalog.tpu import JOB_NAME_LABEL
from webhook.policy.workloads import WORKLOADS, Workload

# kubectl's short names of the kinds that have them (`kubectl api-resources`)
SHORT_NAMES = {
    "po": ("", "Pod"),
    "cj": ("batch", "CronJob"),
    "deploy": ("apps", "Deployment"),
    "sts": ("apps", "StatefulSet"),
    "ds": ("apps", "DaemonSet"),
    "lws": ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
}
RAY_CLUSTER_LABEL = "ray.io/cluster"


class UnknownKind(ValueError):
    """NAME names no kind tpu-webhook knows (said as kubectl says it)."""


def resolve(name: str) -> tuple[Workload, str]:
    """`jobset/train` -> (the JobSet entry, "train"); `train` -> (the Pod entry, "train")."""
    kind, slash, rest = name.partition("/")
    if not slash:
        return WORKLOADS[("", "Pod")], name
    if not rest:
        raise UnknownKind("arguments in resource/name form must have a single resource and name")
    wanted = kind.lower()
    for workload in WORKLOADS.values():
        plural = workload.resource
        names = {workload.kind.lower(), plural, f"{plural}.{workload.group}"}
        names.add(f"{workload.kind.lower()}.{workload.group}")
        if wanted in names:
            return workload, rest
    if wanted in SHORT_NAMES:
        return WORKLOADS[SHORT_NAMES[wanted]], rest
    raise UnknownKind(f'the server doesn\'t have a resource type "{kind}"')


def _labels(label: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda obj: f"{label}={_meta(obj).get('name', '')}"


def _match_labels(obj: Mapping[str, Any]) -> str:
    """A Deployment's, StatefulSet's or DaemonSet's `spec.selector.matchLabels`."""
    spec = obj.get("spec")
    selector = spec.get("selector") if isinstance(spec, dict) else None
    labels = selector.get("matchLabels") if isinstance(selector, dict) else None
    if not isinstance(labels, dict) or not labels:
        return ""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


# (group, kind) -> the label selector of the Pods it makes (its controller's label)
POD_SELECTORS: dict[tuple[str, str], Callable[[Mapping[str, Any]], str]] = {
    ("batch", "Job"): _labels(JOB_NAME_LABEL),
    ("jobset.x-k8s.io", "JobSet"): _labels("jobset.sigs.k8s.io/jobset-name"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): _labels("leaderworkerset.sigs.k8s.io/name"),
    ("ray.io", "RayCluster"): _labels(RAY_CLUSTER_LABEL),
    ("apps", "Deployment"): _match_labels,
    ("apps", "StatefulSet"): _match_labels,
    ("apps", "DaemonSet"): _match_labels,
}


def pod_selector(workload: Workload, obj: Mapping[str, Any]) -> str:
    """The label selector of the workload's Pods; "" when it has none tpu-webhook knows."""
    select = POD_SELECTORS.get((workload.group, workload.kind))
    return select(obj) if select is not None else ""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}
