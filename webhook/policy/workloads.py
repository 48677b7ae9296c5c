"""The workload table: each kind the webhook decides, where it keeps its pod templates, how their
Pods form a slice, and what the kind checks as an owner. Decisions look kinds up here; nothing
matches a kind by its name elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from webhook.catalog.tpu import Catalog, SliceShape
from webhook.policy.cluster import ClusterView
from webhook.policy.exemptions import Exemptions
from webhook.policy.mutate import PatchOp, job_pod_worker_env
from webhook.policy.owners import jobset, leaderworkerset, pathways, trainjob
from webhook.policy.paths import FieldPath
from webhook.policy.podspec import TpuSpec
from webhook.policy.templates import (
    EACH,
    JOB_HOSTS,
    JOBSET_HOSTS,
    OWNER_COUNTED,
    POD_TEMPLATE,
    STATEFULSET_HOSTS,
    EnvVar,
    HostModel,
    Path,
    Site,
    Template,
    dig,
    expand,
    resolved,
)
from webhook.policy.violations import Violation

ChildPodEnv = Callable[
    [Mapping[str, Any], TpuSpec, SliceShape],
    tuple[list[EnvVar], list[PatchOp], list[Violation]],
]
# What a kind checks as a whole, where a user wrote it: its own fields, its own numbering.
OwnerCheck = Callable[
    [Mapping[str, Any], list[tuple[Site, TpuSpec]], Catalog, Exemptions, ClusterView],
    list[Violation],
]


@dataclass(frozen=True, slots=True)
class Workload:
    group: str
    version: str
    kind: str
    resource: str
    templates: tuple[Template, ...]
    # What the kind checks as a whole where a user wrote it (its own fields and numbering):
    # policy/owners/<kind>.py; None: nothing beyond its templates' rules.
    check: OwnerCheck | None = None
    # The multislice variables of its TPU templates (MEGASCALE_*, opt-in): JobSet.
    megascale: Callable[[Mapping[str, Any], Site], list[EnvVar]] | None = None
    # The worker variables of a Pod it owns that still lacks them: a Job's Pods.
    child_pod_env: ChildPodEnv | None = None
    # A DRA claim (or claim template): no pod template; its TPU requests are what is checked.
    claim: bool = False

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
        for indices, body in expand(obj, template.path, ()):
            concrete = resolved(template.path, indices)
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
        Workload(
            "batch",
            "v1",
            "Job",
            "jobs",
            (Template(POD_TEMPLATE, JOB_HOSTS),),
            child_pod_env=job_pod_worker_env,
        ),
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
        # one Pod per node: an agent on TPU nodes (chip-less), or one TPU host each
        Workload("apps", "v1", "DaemonSet", "daemonsets", (Template(POD_TEMPLATE, None),)),
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
            jobset.check,
            megascale=jobset.megascale_env,
        ),
        Workload(
            "leaderworkerset.x-k8s.io",
            "v1",
            "LeaderWorkerSet",
            "leaderworkersets",
            (
                Template((*leaderworkerset.TEMPLATE, "leaderTemplate"), OWNER_COUNTED),
                Template((*leaderworkerset.TEMPLATE, "workerTemplate"), OWNER_COUNTED),
            ),
            leaderworkerset.check,
        ),
        Workload(
            "resource.k8s.io",
            "v1",
            "ResourceClaimTemplate",
            "resourceclaimtemplates",
            (),
            claim=True,
        ),
        Workload("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", (), claim=True),
        # Owners that make JobSets from fields of their own: decided by those fields
        Workload(
            "pathways-job.pathways.domain", "v1", "PathwaysJob", "pathwaysjobs", (), pathways.check
        ),
        Workload("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs", (), trainjob.check),
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
