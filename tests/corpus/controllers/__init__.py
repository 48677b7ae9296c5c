"""The objects controllers create from the corpus's owners, as they reach admission.

Pure functions over plain dicts, derived from each controller's source (cited per function as
`<NAME> <path>`, NAME one of the versions in `common.py`), one module per controller:

- `stored(obj)`: an owner as the API server stores it (its own defaulting and the defaults its
  operator's webhook writes), so its children are derived from what the controller really reads.
- `children(owner, ancestors, cluster)`: the objects the owner's controller creates (CREATE
  requests), in the order it creates them; `ancestors` are the stored owners above `owner`,
  nearest last; `cluster` the other objects a controller reads (a TrainJob's runtime).
- `lws_pod_webhook(pod)` and `kuberay_tpu_webhook(pod)`: the Pod mutations the owners' own webhooks
  make (TPU worker variables among them), so a test can run them before or after ours.
- `kueue_suspend(obj)` / `kueue_admit(obj, node_labels)`: what Kueue does to a queued workload at
  CREATE and the UPDATE that admits it.

Versions read: Kubernetes v1.35.4 (the control plane `tests/tools` builds; its Job and StatefulSet
controllers), kubernetes-sigs/jobset, kubernetes-sigs/lws, ray-project/kuberay,
ai-on-gke/kuberay-tpu-webhook, kubernetes-sigs/kueue, kubeflow/trainer (TrainJob) and
google/pathways-job (PathwaysJob) at the commits named in `common.py`.
Generated names (random suffixes, hashes) are replaced by stable stand-ins of the same shape.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from tests.corpus.controllers.common import (
    ACCELERATOR,
    TOPOLOGY,
    TPU,
    Obj,
    containers,
    env_value,
    group_kind,
    labels_of,
    meta,
    name_of,
    tpu_chips,
    uid_of,
)
from tests.corpus.controllers.jobset import default_jobset, jobset_jobs
from tests.corpus.controllers.kuberay import (
    RAY_HOST_INDEX,
    RAY_REPLICA_INDEX,
    cluster_spec_of,
    default_ray_groups,
    kuberay_tpu_webhook,
    ray_owned_cluster,
    raycluster_pods,
)
from tests.corpus.controllers.kubernetes import (
    COMPLETION_INDEX,
    daemonset_pods,
    default_job,
    deployment_replicaset,
    job_pods,
    replicaset_pods,
    statefulset_pods,
)
from tests.corpus.controllers.kueue import kueue_admit, kueue_queued, kueue_suspend
from tests.corpus.controllers.leaderworkerset import (
    default_lws,
    lws_leader_statefulset,
    lws_worker_statefulsets,
)
from tests.corpus.controllers.leaderworkerset_webhook import LWS_NAME, lws_pod_webhook
from tests.corpus.controllers.pathways import default_pathwaysjob, pathways_jobset
from tests.corpus.controllers.trainer import default_trainjob, trainjob_jobset

__all__ = [
    "ACCELERATOR",
    "COMPLETION_INDEX",
    "LWS_NAME",
    "RAY_HOST_INDEX",
    "RAY_REPLICA_INDEX",
    "TOPOLOGY",
    "TPU",
    "children",
    "cluster_spec_of",
    "containers",
    "env_value",
    "group_kind",
    "kuberay_tpu_webhook",
    "kueue_admit",
    "kueue_queued",
    "kueue_suspend",
    "labels_of",
    "lws_pod_webhook",
    "name_of",
    "stored",
    "tpu_chips",
]

RAY_OWNERS = (("ray.io", "RayCluster"), ("ray.io", "RayJob"), ("ray.io", "RayService"))
TRAINJOB = ("trainer.kubeflow.org", "TrainJob")
PATHWAYSJOB = ("pathways-job.pathways.domain", "PathwaysJob")


def stored(obj: Mapping[str, Any]) -> Obj:
    """`obj` as stored: the API server's and the operator's defaulting that children depend on."""
    out = copy.deepcopy(dict(obj))
    meta(out).setdefault("namespace", "default")
    meta(out)["uid"] = uid_of(out)
    kind = group_kind(out)
    if kind == ("batch", "Job"):
        default_job(out)
    elif kind == ("jobset.x-k8s.io", "JobSet"):
        default_jobset(out)
    elif kind == ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"):
        default_lws(out)
    elif kind in RAY_OWNERS:
        default_ray_groups(cluster_spec_of(out))
    elif kind == TRAINJOB:
        default_trainjob(out)
    elif kind == PATHWAYSJOB:
        default_pathwaysjob(out)
    return out


def children(
    owner: Mapping[str, Any],
    ancestors: Sequence[Mapping[str, Any]] = (),
    cluster: Sequence[Mapping[str, Any]] = (),
) -> list[Obj]:
    """What `owner`'s controller creates from it (owner as stored, see `stored`)."""
    kind = group_kind(owner)
    if kind == ("batch", "Job"):
        return job_pods(owner)
    if kind == ("apps", "StatefulSet"):
        return statefulset_pods(owner)
    if kind == ("apps", "Deployment"):
        return [deployment_replicaset(owner)]
    if kind == ("apps", "ReplicaSet"):
        return replicaset_pods(owner)
    if kind == ("apps", "DaemonSet"):
        return daemonset_pods(owner)
    if kind == ("jobset.x-k8s.io", "JobSet"):
        return jobset_jobs(owner)
    if kind == ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"):
        return [lws_leader_statefulset(owner)]
    if kind == ("", "Pod"):
        lws = [a for a in ancestors if group_kind(a)[1] == "LeaderWorkerSet"]
        return lws_worker_statefulsets(owner, lws[-1]) if lws else []
    if kind == ("ray.io", "RayCluster"):
        return raycluster_pods(owner)
    if kind in (("ray.io", "RayJob"), ("ray.io", "RayService")):
        ray_cluster = ray_owned_cluster(owner)
        return [ray_cluster] if ray_cluster else []
    if kind == TRAINJOB:
        return trainjob_jobset(owner, cluster)
    if kind == PATHWAYSJOB:
        return pathways_jobset(owner)
    return []
