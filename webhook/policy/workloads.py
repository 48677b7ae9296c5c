"""Where each workload keeps its pod spec, and how its hosts are counted, numbered and named.

One entry per kind: JobSet, LeaderWorkerSet and RayCluster become entries here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from webhook.catalog.tpu import JOB_COMPLETION_INDEX, POD_INDEX_LABEL
from webhook.policy.paths import FieldPath

Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HostModel:
    """How a workload runs the hosts of a multi-host slice."""

    controller: Path  # the spec that carries the host counts, from the object's root
    host_counts: tuple[str, ...]  # fields of `controller` that must equal the host count
    index_field_ref: str  # Downward API path of this host's index
    service: Path | None  # field naming the headless Service; None: the pod spec's subdomain
    named_by_object: bool  # hostnames are `<metadata.name>-<i>`; False: names are generated
    indexed_mode: tuple[str, str] | None = None  # (field of controller, required value)
    retries: str | None = None  # field of controller whose non-zero value breaks a slice
    retries_default: int = 0
    count_defaults: Mapping[str, int] = field(default_factory=dict)  # what the API server fills
    # from the object's root, each field of `controller` a rule or the mutation reads
    paths: Mapping[str, Path] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        mode = () if self.indexed_mode is None else (self.indexed_mode[0],)
        retries = () if self.retries is None else (self.retries,)
        names = (*mode, *self.host_counts, *retries)
        object.__setattr__(self, "paths", {n: (*self.controller, n) for n in names})


@dataclass(frozen=True, slots=True)
class Workload:
    group: str
    kind: str
    resource: str
    pod_spec: Path
    hosts: HostModel | None  # None: cannot form a multi-host slice by itself
    spec_path: FieldPath = field(init=False, repr=False, compare=False)  # of pod_spec
    spec_pointer: str = field(init=False, repr=False, compare=False)  # of pod_spec

    def __post_init__(self) -> None:
        path = FieldPath.root(*self.pod_spec)
        object.__setattr__(self, "spec_path", path)
        object.__setattr__(self, "spec_pointer", path.pointer())

    def spec_of(self, obj: Mapping[str, Any]) -> Any:
        return dig(obj, self.pod_spec)


_JOB_HOSTS = HostModel(
    controller=("spec",),
    host_counts=("parallelism", "completions"),
    index_field_ref=f"metadata.annotations['{JOB_COMPLETION_INDEX}']",
    service=None,
    named_by_object=True,
    indexed_mode=("completionMode", "Indexed"),
    retries="backoffLimit",
    retries_default=6,
    count_defaults={"parallelism": 1},
)

WORKLOADS: dict[tuple[str, str], Workload] = {
    (w.group, w.kind): w
    for w in (
        Workload("", "Pod", "pods", ("spec",), None),
        Workload("batch", "Job", "jobs", ("spec", "template", "spec"), _JOB_HOSTS),
        Workload(
            "batch",
            "CronJob",
            "cronjobs",
            ("spec", "jobTemplate", "spec", "template", "spec"),
            replace(_JOB_HOSTS, controller=("spec", "jobTemplate", "spec"), named_by_object=False),
        ),
        Workload("apps", "Deployment", "deployments", ("spec", "template", "spec"), None),
        Workload(
            "apps",
            "StatefulSet",
            "statefulsets",
            ("spec", "template", "spec"),
            HostModel(
                controller=("spec",),
                host_counts=("replicas",),
                index_field_ref=f"metadata.labels['{POD_INDEX_LABEL}']",
                service=("spec", "serviceName"),
                named_by_object=True,
            ),
        ),
    )
}

# Owners whose Pods may be hosts of a multi-host slice (their own admission checked the slice).
SLICE_OWNERS = frozenset({("batch", "Job"), ("apps", "StatefulSet")})


def workload_for(group: str, kind: str) -> Workload | None:
    return WORKLOADS.get((group, kind))


def dig(obj: Any, path: Path) -> Any:
    """obj[path[0]][path[1]]... or None where a step is missing or not a mapping."""
    for name in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(name)
    return obj
