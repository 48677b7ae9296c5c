"""Where a kind keeps its pod templates, and how the Pods of a template form a slice: the shapes
the workload table (policy/workloads.py) is made of, and the owners' rules read.

A kind may carry several pod templates, some in lists (a JobSet's replicatedJobs, a RayCluster's
worker groups): a path step `*` stands for every item of a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from webhook.catalog.tpu import JOB_COMPLETION_INDEX, POD_INDEX_LABEL
from webhook.policy.bounds import MAX_POD_TEMPLATES
from webhook.policy.paths import FieldPath
from webhook.policy.podspec import TpuSpec

Path = tuple[str, ...]
Step = str | int
ConcretePath = tuple[Step, ...]
EACH = "*"  # a path step: every item of the list there
EnvVar = dict[str, Any]  # one entry of a container's env, as written in a pod spec
Obj = Mapping[str, Any]  # an object as sent


@dataclass(frozen=True, slots=True)
class HostModel:
    """How a workload runs the hosts of a multi-host slice."""

    controller: Path  # the spec that carries the host counts, from the object's root
    host_counts: tuple[str, ...]  # fields of `controller` that must equal the host count
    index_field_ref: str  # Downward API path of this host's index
    service: Path | None  # field naming the headless Service; None: the pod spec's subdomain
    named_by_object: bool  # hostnames are `<metadata.name>-<i>`; False: names are generated
    indexed_mode: tuple[str, str] | None = None  # (field of controller, required value)
    indexed_default: str | None = None  # what the owner's defaulting sets when it is unset
    retries: str | None = None  # field of controller whose non-zero value breaks a slice
    retries_default: int = 0
    retry_advice: str = "retry the whole Job (or use JobSet)"
    count_defaults: Mapping[str, int] = field(default_factory=dict)  # what the API server fills
    # Whether the object is still a whole slice when a controller made it: a Job is (a JobSet's
    # or a CronJob's Job numbers its Pods like any Job); a StatefulSet may be part of one (a
    # LeaderWorkerSet's), so tpu-webhook writes no worker variables into it then.
    whole_slice_when_owned: bool = True
    # Whether tpu-webhook writes the worker variables into this template at all (False where
    # the owner's own machinery writes them per Pod: LeaderWorkerSet, KubeRay; or where they
    # differ per child: a JobSet's Jobs get them when they are created).
    injects: bool = True
    # Whether the counts must match a single-host slice too (1): a RayCluster worker group's
    # replica is one slice, so numOfHosts 2 on a one-host slice makes two half-wired "hosts".
    counts_single_host: bool = False
    # from the object's root, each field of `controller` a rule or the mutation reads
    paths: Mapping[str, Path] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        mode = () if self.indexed_mode is None else (self.indexed_mode[0],)
        retries = () if self.retries is None else (self.retries,)
        names = (*mode, *self.host_counts, *retries)
        object.__setattr__(self, "paths", {n: (*self.controller, n) for n in names})


@dataclass(frozen=True, slots=True)
class Template:
    """One pod template of a kind: the object holding `metadata` and `spec` of its Pods."""

    path: Path  # () for a Pod itself
    hosts: HostModel | None  # None: its Pods cannot form a multi-host slice by themselves
    # Precomputed for templates outside lists: the common case pays no path building.
    spec_path: FieldPath = field(init=False, repr=False, compare=False)
    spec_pointer: str = field(init=False, repr=False, compare=False)
    meta_path: FieldPath = field(init=False, repr=False, compare=False)
    # whether the template is an item of a list (JobSet's replicatedJobs): read per review
    in_list: bool = field(init=False, repr=False, compare=False)
    # the list the template is an item of (`spec.replicatedJobs`); () outside lists
    list_path: Path = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec_path", FieldPath.root(*self.path, "spec"))
        object.__setattr__(self, "spec_pointer", self.spec_path.pointer())
        object.__setattr__(self, "meta_path", FieldPath.root(*self.path, "metadata"))
        in_list = EACH in self.path
        object.__setattr__(self, "in_list", in_list)
        object.__setattr__(self, "list_path", self.path[: self.path.index(EACH)] if in_list else ())

    def site(self, body: Mapping[str, Any]) -> Site:
        """This template (outside any list) found in an object as `body`."""
        return Site(self, (), body, self.spec_path, self.spec_pointer, self.meta_path)


class Site(NamedTuple):
    """One pod template found in one object: list steps resolved to indices. (A NamedTuple:
    built per TPU template of every review, where a frozen dataclass pays a setattr per field.)"""

    template: Template
    indices: tuple[int, ...]
    body: Mapping[str, Any]  # the template: {metadata, spec}, or the Pod
    spec_path: FieldPath
    spec_pointer: str
    meta_path: FieldPath

    @property
    def spec(self) -> Any:
        return self.body.get("spec")

    @property
    def metadata(self) -> Any:
        return self.body.get("metadata")

    def resolve(self, path: Path) -> ConcretePath:
        """`path` with each `*` replaced by this site's index in that list, in order."""
        if EACH not in path:
            return path
        indices = iter(self.indices)
        return tuple(next(indices) if step == EACH else step for step in path)


# The TPU pod templates of an object, each with its TPU view (decide.tpu_sites).
Sites = list[tuple[Site, TpuSpec]]


def expand(
    node: Any, path: Path, indices: tuple[int, ...]
) -> list[tuple[tuple[int, ...], dict[str, Any]]]:
    """(indices, template) for every template at `path` under `node`."""
    if not path:
        return [(indices, node)] if isinstance(node, dict) else []
    step, rest = path[0], path[1:]
    if step == EACH:
        if not isinstance(node, list):
            return []
        found = []
        for i, item in enumerate(node[:MAX_POD_TEMPLATES]):
            found += expand(item, rest, (*indices, i))
        return found
    if not isinstance(node, dict):
        return []
    return expand(node.get(step), rest, indices)


def resolved(path: Path, indices: tuple[int, ...]) -> ConcretePath:
    steps = iter(indices)
    return tuple(next(steps) if step == EACH else step for step in path)


POD_TEMPLATE = ("spec", "template")

JOB_HOSTS = HostModel(
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

STATEFULSET_HOSTS = HostModel(
    controller=("spec",),
    host_counts=("replicas",),
    index_field_ref=f"metadata.labels['{POD_INDEX_LABEL}']",
    service=("spec", "serviceName"),
    named_by_object=True,
    whole_slice_when_owned=False,
)

JOBSET_HOSTS = replace(
    JOB_HOSTS,
    controller=("spec", "replicatedJobs", EACH, "template", "spec"),
    named_by_object=False,
    indexed_default="Indexed",  # JobSet's webhook defaults it
    retry_advice="let the JobSet's failurePolicy restart the whole JobSet",
    injects=False,
)
# Templates whose hosts the owner's own rules count (policy/owners): nothing generic to check.
OWNER_COUNTED = HostModel(
    controller=(),
    host_counts=(),
    index_field_ref="",
    service=None,
    named_by_object=False,
    injects=False,
)


def dig(obj: Any, path: tuple[Step, ...]) -> Any:
    """obj[path[0]][path[1]]... or None where a step is missing or of the wrong type."""
    for step in path:
        if isinstance(step, int):
            if not isinstance(obj, list) or step >= len(obj):
                return None
            obj = obj[step]
        elif isinstance(obj, dict):
            obj = obj.get(step)
        else:
            return None
    return obj
