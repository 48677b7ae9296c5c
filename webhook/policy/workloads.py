"""Where each workload keeps its pod templates, and how the Pods of each form a slice.

One entry per kind. A kind may carry several pod templates, some in lists (a JobSet's
replicatedJobs, a RayCluster's worker groups): a path step `*` stands for every item of a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from webhook.catalog.tpu import JOB_COMPLETION_INDEX, POD_INDEX_LABEL
from webhook.policy.bounds import MAX_POD_TEMPLATES
from webhook.policy.paths import FieldPath

Path = tuple[str, ...]
Step = str | int
ConcretePath = tuple[Step, ...]
EACH = "*"  # a path step: every item of the list there


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec_path", FieldPath.root(*self.path, "spec"))
        object.__setattr__(self, "spec_pointer", self.spec_path.pointer())
        object.__setattr__(self, "meta_path", FieldPath.root(*self.path, "metadata"))

    @property
    def in_list(self) -> bool:
        return EACH in self.path

    @property
    def list_path(self) -> Path:
        """The list the template is an item of (`spec.replicatedJobs`); () outside lists."""
        return self.path[: self.path.index(EACH)] if self.in_list else ()

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


@dataclass(frozen=True, slots=True)
class Workload:
    group: str
    version: str
    kind: str
    resource: str
    templates: tuple[Template, ...]

    @property
    def pod_spec_paths(self) -> tuple[Path, ...]:
        """Every pod spec of the kind, `*` for list items (registration's matchConditions)."""
        return tuple((*t.path, "spec") for t in self.templates)

    def sites(self, obj: Mapping[str, Any]) -> list[Site]:
        found: list[Site] = []
        for template in self.templates:
            found += self.sites_of(obj, template)
        return found

    def sites_of(self, obj: Mapping[str, Any], template: Template) -> list[Site]:
        """Where `template` sits in `obj`: once, or once per item of its list."""
        if not template.in_list:
            body = dig(obj, template.path) if template.path else obj
            return [template.site(body)] if isinstance(body, dict) else []
        found = []
        for indices, body in _expand(obj, template.path, ()):
            concrete = _resolved(template.path, indices)
            spec_path = FieldPath.of((*concrete, "spec"))
            found.append(
                Site(
                    template,
                    indices,
                    body,
                    spec_path,
                    spec_path.pointer(),
                    FieldPath.of((*concrete, "metadata")),
                )
            )
        return found


def _expand(
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
            found += _expand(item, rest, (*indices, i))
        return found
    if not isinstance(node, dict):
        return []
    return _expand(node.get(step), rest, indices)


def _resolved(path: Path, indices: tuple[int, ...]) -> ConcretePath:
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
LWS_TEMPLATE = ("spec", "leaderWorkerTemplate")
RAY_CLUSTER_SPECS = {"RayCluster": ("spec",), "RayJob": ("spec", "rayClusterSpec")}
RAY_CLUSTER_SPECS["RayService"] = ("spec", "rayClusterConfig")


def _ray(kind: str, resource: str) -> Workload:
    """A RayCluster spec (itself, or inside a RayJob or RayService): a head, and worker groups
    of `numOfHosts` Pods per replica, each replica one slice."""
    at = RAY_CLUSTER_SPECS[kind]
    workers = HostModel(
        controller=(*at, "workerGroupSpecs", EACH),
        host_counts=("numOfHosts",),
        index_field_ref="",
        service=None,
        named_by_object=False,
        count_defaults={"numOfHosts": 1},
        injects=False,
        counts_single_host=True,
    )
    return Workload(
        "ray.io",
        "v1",
        kind,
        resource,
        (
            Template((*at, "headGroupSpec", "template"), OWNER_COUNTED),
            Template((*at, "workerGroupSpecs", EACH, "template"), workers),
        ),
    )


WORKLOADS: dict[tuple[str, str], Workload] = {
    (w.group, w.kind): w
    for w in (
        Workload("", "v1", "Pod", "pods", (Template((), None),)),
        Workload("batch", "v1", "Job", "jobs", (Template(POD_TEMPLATE, JOB_HOSTS),)),
        Workload(
            "batch",
            "v1",
            "CronJob",
            "cronjobs",
            (
                Template(
                    ("spec", "jobTemplate", "spec", "template"),
                    replace(
                        JOB_HOSTS, controller=("spec", "jobTemplate", "spec"), named_by_object=False
                    ),
                ),
            ),
        ),
        Workload("apps", "v1", "Deployment", "deployments", (Template(POD_TEMPLATE, None),)),
        Workload(
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            (Template(POD_TEMPLATE, STATEFULSET_HOSTS),),
        ),
        Workload(
            "jobset.x-k8s.io",
            "v1alpha2",
            "JobSet",
            "jobsets",
            (
                Template(
                    ("spec", "replicatedJobs", EACH, "template", "spec", "template"), JOBSET_HOSTS
                ),
            ),
        ),
        Workload(
            "leaderworkerset.x-k8s.io",
            "v1",
            "LeaderWorkerSet",
            "leaderworkersets",
            (
                Template((*LWS_TEMPLATE, "leaderTemplate"), OWNER_COUNTED),
                Template((*LWS_TEMPLATE, "workerTemplate"), OWNER_COUNTED),
            ),
        ),
        _ray("RayCluster", "rayclusters"),
        _ray("RayJob", "rayjobs"),
        _ray("RayService", "rayservices"),
    )
}


def workload_for(group: str, kind: str) -> Workload | None:
    return WORKLOADS.get((group, kind))


# Kinds whose controllers make the workloads of this table, beyond the table's own kinds (a Pod
# owns a LeaderWorkerSet group's worker StatefulSet): a Deployment's ReplicaSets own its Pods.
OWNER_KINDS: frozenset[tuple[str, str]] = frozenset({*WORKLOADS, ("apps", "ReplicaSet")})


def owner_role(group: str, kind: str) -> str | None:
    """What a controlling owner of this kind means for its child: "known" (the table knows how
    it makes workloads), "unknown" (a custom kind: it may, but the table does not know how), or
    None (a built-in kind that makes no workloads, a ConfigMap or a Service: no owner at all)."""
    if (group, kind) in OWNER_KINDS:
        return "known"
    return None if builtin_group(group) else "unknown"


def builtin_group(group: str) -> bool:
    """An API group of Kubernetes itself: the core group, the dotless ones (apps, batch, policy,
    autoscaling) and `*.k8s.io` (networking.k8s.io, resource.k8s.io...), but not the SIGs'
    `*.x-k8s.io` projects (JobSet, LeaderWorkerSet, Kueue), which are custom resources."""
    return "." not in group or (group.endswith(".k8s.io") and not group.endswith(".x-k8s.io"))


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
