"""The objects controllers create from the corpus's owners, as they reach admission.

Pure functions over plain dicts, derived from each controller's source (cited per function):

- `stored(obj)`: an owner as the API server stores it (its own defaulting and the defaults its
  operator's webhook writes), so its children are derived from what the controller really reads.
- `children(owner, ancestors)`: the objects the owner's controller creates (CREATE requests), in
  the order it creates them; `ancestors` are the stored owners above `owner`, nearest last.
- `lws_pod_webhook(pod)` and `kuberay_tpu_webhook(pod)`: the Pod mutations the owners' own webhooks
  make (TPU worker variables among them), so a test can run them before or after ours.
- `kueue_suspend(obj)` / `kueue_admit(obj, node_labels)`: what Kueue does to a queued workload at
  CREATE and the UPDATE that admits it.

Versions read: Kubernetes v1.35.4 (the control plane `tests/tools` builds; its Job and StatefulSet
controllers), kubernetes-sigs/jobset, kubernetes-sigs/lws, ray-project/kuberay,
ai-on-gke/kuberay-tpu-webhook and kubernetes-sigs/kueue at the commits named below.
Generated names (random suffixes, hashes) are replaced by stable stand-ins of the same shape.
"""

from __future__ import annotations

import copy
import hashlib
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]

K8S = "kubernetes/kubernetes@v1.35.4"
JOBSET = "kubernetes-sigs/jobset@08dfbdfd682714a9ab929633eca8dc95315187e7"
LWS = "kubernetes-sigs/lws@060ab4da17eea1f0865fcbd3236bb1075e2cea32"
KUBERAY = "ray-project/kuberay@feeaf72facab4881ba2b179248bb67315634e229"
KUBERAY_TPU = "ai-on-gke/kuberay-tpu-webhook@ef658db45757e88abc584b0d17fbab930b45316f"
KUEUE = "kubernetes-sigs/kueue@ff69552e79ad21652c36caa97038382e55625cf7"

TPU = "google.com/tpu"
ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY = "cloud.google.com/gke-tpu-topology"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_REVISION = "leaderworkerset.sigs.k8s.io/template-revision-hash"
LWS_LEADER_NAME = "leaderworkerset.sigs.k8s.io/leader-name"
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_SUBGROUP_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
LWS_SUBGROUP_SIZE = "leaderworkerset.sigs.k8s.io/subgroup-size"
LWS_SUBGROUP_TYPE = "leaderworkerset.sigs.k8s.io/subgroup-policy-type"
LWS_SUBGROUP_INDEX = "leaderworkerset.sigs.k8s.io/subgroup-index"
LWS_SUBGROUP_KEY = "leaderworkerset.sigs.k8s.io/subgroup-key"
LWS_SUBDOMAIN_POLICY = "leaderworkerset.sigs.k8s.io/subdomainPolicy"
LWS_LEADER_TPUS = "leaderworkerset.sigs.k8s.io/leader-requests-tpus"

RAY_CLUSTER = "ray.io/cluster"
RAY_GROUP = "ray.io/group"
RAY_REPLICA_INDEX = "ray.io/worker-group-replica-index"
RAY_REPLICA_NAME = "ray.io/worker-group-replica-name"
RAY_HOST_INDEX = "ray.io/replica-host-index"


# ---- small helpers ---------------------------------------------------------------------------


def uid_of(obj: Mapping[str, Any]) -> str:
    """A stable stand-in for the UID the API server gives `obj`."""
    meta = obj.get("metadata") or {}
    key = f"{obj.get('kind')}/{meta.get('namespace', 'default')}/{meta.get('name')}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, key))


def stand_in(text: str, length: int = 5) -> str:
    """A stable stand-in for a random suffix (utilrand.String) or a short hash."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery utilrand's alphabet
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:length])


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()  # the hash LWS and JobSet use


def group_kind(obj: Mapping[str, Any]) -> tuple[str, str]:
    return str(obj.get("apiVersion", "")).rpartition("/")[0], str(obj.get("kind", ""))


def meta(obj: Obj) -> Obj:
    found: Obj = obj.setdefault("metadata", {})
    return found


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "default")


def controller_ref(owner: Mapping[str, Any]) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_from_template(template: Mapping[str, Any], owner: Mapping[str, Any]) -> Obj:
    """controller.GetPodFromTemplate (K8S pkg/controller/controller_utils.go): the template's
    labels, annotations, finalizers and spec, and the owner as controller."""
    tmeta = template.get("metadata") or {}
    pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {}}
    for key in ("labels", "annotations", "finalizers"):
        if tmeta.get(key):
            pod["metadata"][key] = copy.deepcopy(tmeta[key])
    pod["metadata"]["namespace"] = namespace_of(owner)
    pod["metadata"]["ownerReferences"] = [controller_ref(owner)]
    pod["spec"] = copy.deepcopy(template.get("spec") or {})
    return pod


def containers(spec: Mapping[str, Any], *lists: str) -> list[Obj]:
    found: list[Obj] = []
    for key in lists or ("containers", "initContainers"):
        found += [c for c in spec.get(key) or [] if isinstance(c, dict)]
    return found


def listed(obj: Obj, key: str) -> list[Any]:
    """obj[key] as a list to append to; a key written with no value (`env:`) reads as null."""
    if obj.get(key) is None:
        obj[key] = []
    value: list[Any] = obj[key]
    return value


def tpu_chips(container: Mapping[str, Any]) -> int:
    """The chips a container asks for (limits first, as LWS's numTPUsRequested reads them)."""
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        value = (resources.get(section) or {}).get(TPU)
        if value not in (None, 0, "0"):
            return int(value)
    return 0


def env_value(container: Mapping[str, Any], name: str) -> str | None:
    for item in container.get("env") or []:
        if item.get("name") == name:
            return str(item.get("value") or "")
    return None


def parent_and_ordinal(name: str) -> tuple[str, int]:
    """GetParentNameAndOrdinal (LWS pkg/utils/statefulset/statefulset_utils.go)."""
    match = re.fullmatch(r"(.*)-([0-9]+)", name)
    return (match.group(1), int(match.group(2))) if match else ("", -1)


# ---- stored owners ---------------------------------------------------------------------------


def stored(obj: Mapping[str, Any]) -> Obj:
    """`obj` as stored: the API server's and the operator's defaulting that children depend on."""
    out = copy.deepcopy(dict(obj))
    meta(out).setdefault("namespace", "default")
    meta(out)["uid"] = uid_of(out)
    kind = group_kind(out)
    if kind == ("batch", "Job"):
        _default_job(out)
    elif kind == ("jobset.x-k8s.io", "JobSet"):
        _default_jobset(out)
    elif kind == ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"):
        _default_lws(out)
    elif kind == ("ray.io", "RayCluster"):
        _default_ray_groups(out["spec"])
    elif kind in (("ray.io", "RayJob"), ("ray.io", "RayService")):
        key = "rayClusterSpec" if out["kind"] == "RayJob" else "rayClusterConfig"
        _default_ray_groups(out["spec"][key])
    return out


def _default_job(job: Obj) -> None:
    """K8S pkg/registry/batch/job/strategy.go generateSelector and pkg/apis/batch/v1/defaults.go."""
    spec = job["spec"]
    uid = uid_of(job)
    if not spec.get("manualSelector"):
        template_labels = meta(spec.setdefault("template", {})).setdefault("labels", {})
        for key, value in (
            ("batch.kubernetes.io/controller-uid", uid),
            ("batch.kubernetes.io/job-name", name_of(job)),
            ("controller-uid", uid),
            ("job-name", name_of(job)),
        ):
            template_labels.setdefault(key, value)
        spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("parallelism", 1)
    spec.setdefault("suspend", False)
    if "backoffLimitPerIndex" not in spec:
        spec.setdefault("backoffLimit", 6)


def _default_jobset(js: Obj) -> None:
    """JobSet's webhook Default (JOBSET pkg/webhooks/jobset_webhook.go) and CRD defaults
    (api/jobset/v1alpha2/jobset_types.go: replicas 1, groupName "default")."""
    spec = js["spec"]
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rjob in spec.get("replicatedJobs") or []:
        rjob.setdefault("replicas", 1)
        rjob.setdefault("groupName", "default")
        job_spec = rjob["template"].setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        if not pod_spec.get("restartPolicy"):
            pod_spec["restartPolicy"] = "OnFailure"
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)


def _default_lws(lws: Obj) -> None:
    """LWS's webhook Default (LWS pkg/webhooks/leaderworkerset_webhook.go) and CRD defaults."""
    spec = lws["spec"]
    spec.setdefault("replicas", 1)
    template = spec.setdefault("leaderWorkerTemplate", {})
    template.setdefault("size", 1)
    template.setdefault("restartPolicy", "RecreateGroupOnPodRestart")
    if template.get("subGroupPolicy") is not None:
        template["subGroupPolicy"].setdefault("subGroupPolicyType", "LeaderWorker")
    rollout = spec.setdefault("rolloutStrategy", {})
    rollout.setdefault("type", "RollingUpdate")
    rollout.setdefault(
        "rollingUpdateConfiguration", {"maxUnavailable": 1, "maxSurge": 0, "partition": 0}
    )
    spec.setdefault("networkConfig", {}).setdefault("subdomainPolicy", "Shared")


def _default_ray_groups(cluster_spec: Obj) -> None:
    """KubeRay CRD defaults (KUBERAY ray-operator/apis/ray/v1/raycluster_types.go)."""
    for group in cluster_spec.get("workerGroupSpecs") or []:
        group.setdefault("replicas", 0)
        group.setdefault("numOfHosts", 1)


# ---- children --------------------------------------------------------------------------------


def children(owner: Mapping[str, Any], ancestors: Sequence[Mapping[str, Any]] = ()) -> list[Obj]:
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
        cluster = ray_owned_cluster(owner)
        return [cluster] if cluster else []
    return []


def job_pods(job: Mapping[str, Any]) -> list[Obj]:
    """K8S pkg/controller/job/job_controller.go manageJob and indexed_job_utils.go: Indexed Pods get
    JOB_COMPLETION_INDEX in every container, the completion-index annotation and label, hostname
    `<job>-<i>` and generateName `<job>-<i>-`; the name is given after mutating admission."""
    spec = job["spec"]
    if spec.get("suspend"):
        return []
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    count = parallelism if completions is None else min(parallelism, int(completions))
    pods = []
    for index in range(count):
        pod = pod_from_template(spec["template"], job)
        listed(meta(pod), "finalizers").append("batch.kubernetes.io/job-tracking")
        if spec.get("completionMode") == "Indexed":
            meta(pod).setdefault("annotations", {})[COMPLETION_INDEX] = str(index)
            meta(pod).setdefault("labels", {})[COMPLETION_INDEX] = str(index)
            for container in containers(pod["spec"]):
                if env_value(container, "JOB_COMPLETION_INDEX") is None:
                    listed(container, "env").append(
                        {
                            "name": "JOB_COMPLETION_INDEX",
                            "valueFrom": {
                                "fieldRef": {"fieldPath": f"metadata.labels['{COMPLETION_INDEX}']"}
                            },
                        }
                    )
            pod["spec"]["hostname"] = f"{name_of(job)}-{index}"
            meta(pod)["generateName"] = f"{name_of(job)}-{index}-"
        else:
            meta(pod)["generateName"] = f"{name_of(job)}-"
        pods.append(pod)
    return pods


def statefulset_pods(sts: Mapping[str, Any]) -> list[Obj]:
    """K8S pkg/controller/statefulset/stateful_set_utils.go newStatefulSetPod: `<sts>-<ordinal>`,
    hostname = name, subdomain = serviceName, pod-name and pod-index labels."""
    spec = sts["spec"]
    start = int((spec.get("ordinals") or {}).get("start", 0))
    pods = []
    for ordinal in range(start, start + int(spec.get("replicas", 1))):
        pod = pod_from_template(spec["template"], sts)
        name = f"{name_of(sts)}-{ordinal}"
        meta(pod)["name"] = name
        pod_labels = meta(pod).setdefault("labels", {})
        pod_labels["statefulset.kubernetes.io/pod-name"] = name
        pod_labels["apps.kubernetes.io/pod-index"] = str(ordinal)
        pod_labels["controller-revision-hash"] = f"{name_of(sts)}-{stand_in(name_of(sts), 10)}"
        pod["spec"]["hostname"] = name
        pod["spec"]["subdomain"] = spec.get("serviceName", "")
        pods.append(pod)
    return pods


def deployment_replicaset(deploy: Mapping[str, Any]) -> Obj:
    """K8S pkg/controller/deployment/sync.go getNewReplicaSet: `<deploy>-<pod-template-hash>`."""
    template_hash = stand_in(name_of(deploy), 10)
    template = copy.deepcopy(deploy["spec"]["template"])
    meta(template).setdefault("labels", {})["pod-template-hash"] = template_hash
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name_of(deploy)}-{template_hash}",
            "namespace": namespace_of(deploy),
            "labels": dict(meta(template)["labels"]),
            "ownerReferences": [controller_ref(deploy)],
        },
        "spec": {"replicas": deploy["spec"].get("replicas", 1), "template": template},
    }


def replicaset_pods(rs: Mapping[str, Any]) -> list[Obj]:
    """K8S pkg/controller/replicaset/replica_set.go: Pods named by generateName `<rs>-`."""
    pods = []
    for _ in range(int(rs["spec"].get("replicas", 1))):
        pod = pod_from_template(rs["spec"]["template"], rs)
        meta(pod)["generateName"] = f"{name_of(rs)}-"
        pods.append(pod)
    return pods


# ---- JobSet ----------------------------------------------------------------------------------


def jobset_jobs(js: Mapping[str, Any]) -> list[Obj]:
    """JOBSET pkg/controllers/jobset_controller.go constructJob and labelAndAnnotateObject: Jobs
    `<js>-<rjob>-<i>` (pkg/util/placement/placement.go GenJobName), labels and annotations on the
    Job and its Pod template, subdomain = JobSet name (or spec.network.subdomain) when DNS
    hostnames are on, suspended when the JobSet is."""
    spec = js["spec"]
    rjobs = spec.get("replicatedJobs") or []
    network = spec.get("network") or {}
    subdomain = network.get("subdomain") or name_of(js)
    jobs = []
    global_index = 0
    for rjob in rjobs:
        group = rjob.get("groupName", "default")
        group_total = sum(int(r.get("replicas", 1)) for r in rjobs if r.get("groupName") == group)
        group_before = 0
        for other in rjobs:
            if other is rjob:
                break
            if other.get("groupName") == group:
                group_before += int(other.get("replicas", 1))
        for index in range(int(rjob.get("replicas", 1))):
            job_name = f"{name_of(js)}-{rjob['name']}-{index}"
            marks = {
                "jobset.sigs.k8s.io/jobset-name": name_of(js),
                "jobset.sigs.k8s.io/jobset-uid": uid_of(js),
                "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                "jobset.sigs.k8s.io/restart-attempt": "0",
                "jobset.sigs.k8s.io/replicatedjob-replicas": str(rjob.get("replicas", 1)),
                "jobset.sigs.k8s.io/global-replicas": str(
                    sum(int(r.get("replicas", 1)) for r in rjobs)
                ),
                "jobset.sigs.k8s.io/job-index": str(index),
                "jobset.sigs.k8s.io/job-key": sha1(f"{namespace_of(js)}/{job_name}"),
                "jobset.sigs.k8s.io/job-global-index": str(global_index + index),
                "jobset.sigs.k8s.io/group-name": group,
                "jobset.sigs.k8s.io/group-replicas": str(group_total),
                "jobset.sigs.k8s.io/job-group-index": str(group_before + index),
            }
            coordinator = spec.get("coordinator")
            if coordinator:
                marks["jobset.sigs.k8s.io/coordinator"] = (
                    f"{name_of(js)}-{coordinator['replicatedJob']}-"
                    f"{coordinator.get('jobIndex', 0)}-{coordinator.get('podIndex', 0)}.{subdomain}"
                )
            job_annotations = {**annotations_of(rjob["template"]), **marks}
            for source in (annotations_of(js), annotations_of(rjob["template"])):
                for key in (
                    "alpha.jobset.sigs.k8s.io/exclusive-topology",
                    "alpha.jobset.sigs.k8s.io/node-selector",
                ):
                    if key in source:
                        job_annotations[key] = source[key]
            job: Obj = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": job_name,
                    "namespace": namespace_of(js),
                    "labels": {**labels_of(rjob["template"]), **marks},
                    "annotations": job_annotations,
                    "ownerReferences": [controller_ref(js)],
                },
                "spec": copy.deepcopy(rjob["template"]["spec"]),
            }
            template = job["spec"]["template"]
            tmeta = meta(template)
            tmeta["labels"] = {**(tmeta.get("labels") or {}), **marks}
            tmeta["annotations"] = {**(tmeta.get("annotations") or {}), **job_annotations}
            if network.get("enableDNSHostnames"):
                template["spec"]["subdomain"] = subdomain
            if "alpha.jobset.sigs.k8s.io/node-selector" in job_annotations:
                selector = template["spec"].setdefault("nodeSelector", {})
                selector["alpha.jobset.sigs.k8s.io/namespaced-job"] = (
                    f"{namespace_of(js)}_{job_name}"
                )
                listed(template["spec"], "tolerations").append(
                    {
                        "key": "alpha.jobset.sigs.k8s.io/no-schedule",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                    }
                )
            job["spec"]["suspend"] = bool(spec.get("suspend", False))
            jobs.append(job)
        global_index += int(rjob.get("replicas", 1))
    return jobs


# ---- LeaderWorkerSet -------------------------------------------------------------------------


def lws_revision(lws: Mapping[str, Any]) -> str:
    """Stand-in for LWS's template revision hash (pkg/utils/revision/revision_utils.go)."""
    return stand_in(f"{namespace_of(lws)}/{name_of(lws)}", 10)


def _lws_group_annotations(lws: Mapping[str, Any]) -> dict[str, str]:
    template = lws["spec"]["leaderWorkerTemplate"]
    found = {LWS_SIZE: str(template["size"])}
    lws_annotations = annotations_of(lws)
    if lws_annotations.get(LWS_EXCLUSIVE):
        found[LWS_EXCLUSIVE] = lws_annotations[LWS_EXCLUSIVE]
    subgroup = template.get("subGroupPolicy")
    if subgroup is not None:
        found[LWS_SUBGROUP_TYPE] = str(subgroup.get("subGroupPolicyType", "LeaderWorker"))
        found[LWS_SUBGROUP_SIZE] = str(subgroup["subGroupSize"])
        if lws_annotations.get(LWS_SUBGROUP_EXCLUSIVE):
            found[LWS_SUBGROUP_EXCLUSIVE] = lws_annotations[LWS_SUBGROUP_EXCLUSIVE]
    return found


def lws_leader_statefulset(lws: Mapping[str, Any]) -> Obj:
    """LWS pkg/controllers/leaderworkerset_controller.go
    constructLeaderStatefulSetApplyConfiguration: StatefulSet `<lws>`, replicas = groups,
    serviceName `<lws>`, the leader template (or the worker template when there is none) with
    worker-index 0 and the group annotations."""
    spec = lws["spec"]
    template_src = spec["leaderWorkerTemplate"].get("leaderTemplate")
    template = copy.deepcopy(template_src or spec["leaderWorkerTemplate"]["workerTemplate"])
    revision = lws_revision(lws)
    tmeta = meta(template)
    tmeta["labels"] = {
        **(tmeta.get("labels") or {}),
        LWS_WORKER_INDEX: "0",
        LWS_NAME: name_of(lws),
        LWS_REVISION: revision,
    }
    group_annotations = _lws_group_annotations(lws)
    if spec["networkConfig"]["subdomainPolicy"] == "UniquePerReplica":
        group_annotations[LWS_SUBDOMAIN_POLICY] = "UniquePerReplica"
    tmeta["annotations"] = {**(tmeta.get("annotations") or {}), **group_annotations}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name_of(lws),
            "namespace": namespace_of(lws),
            "labels": {**labels_of(lws), LWS_NAME: name_of(lws), LWS_REVISION: revision},
            "annotations": {
                **annotations_of(lws),
                "leaderworkerset.sigs.k8s.io/replicas": str(spec["replicas"]),
            },
            "ownerReferences": [controller_ref(lws)],
        },
        "spec": {
            "serviceName": name_of(lws),
            "replicas": spec["replicas"],
            "podManagementPolicy": "Parallel",
            "template": template,
            "selector": {"matchLabels": {LWS_NAME: name_of(lws), LWS_WORKER_INDEX: "0"}},
        },
    }


def lws_worker_statefulsets(leader: Mapping[str, Any], lws: Mapping[str, Any]) -> list[Obj]:
    """LWS pkg/controllers/pod_controller.go constructWorkerStatefulSetApplyConfiguration: per
    leader Pod a StatefulSet named like the leader with size - 1 replicas, ordinals from 1, owned
    by the leader Pod. Reads the group labels LWS's Pod webhook gave the leader. With exclusive
    placement the workers get the leader node's value of the topology key (a stand-in here)."""
    leader_labels = labels_of(leader)
    size = int(lws["spec"]["leaderWorkerTemplate"]["size"])
    if leader_labels.get(LWS_WORKER_INDEX) != "0" or size == 1:
        return []
    leader = lws_pod_webhook(leader)  # group-index and group-key come from LWS's Pod webhook
    leader_labels = labels_of(leader)
    template = copy.deepcopy(lws["spec"]["leaderWorkerTemplate"]["workerTemplate"])
    group = {
        LWS_GROUP_INDEX: leader_labels[LWS_GROUP_INDEX],
        LWS_NAME: name_of(lws),
        LWS_GROUP_KEY: leader_labels[LWS_GROUP_KEY],
    }
    tmeta = meta(template)
    tmeta["labels"] = {**(tmeta.get("labels") or {}), **group, LWS_REVISION: lws_revision(lws)}
    worker_annotations = _lws_group_annotations(lws)
    worker_annotations[LWS_LEADER_NAME] = name_of(leader)
    if any(tpu_chips(c) for c in containers(leader["spec"])):
        worker_annotations[LWS_LEADER_TPUS] = "true"
    tmeta["annotations"] = {**(tmeta.get("annotations") or {}), **worker_annotations}
    topology_key = annotations_of(lws).get(LWS_EXCLUSIVE)
    if topology_key:
        selector = template.setdefault("spec", {}).setdefault("nodeSelector", {})
        selector[topology_key] = f"node-of-{name_of(leader)}"
    unique = lws["spec"]["networkConfig"]["subdomainPolicy"] == "UniquePerReplica"
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": name_of(leader),
                "namespace": namespace_of(leader),
                "labels": {**labels_of(lws), **group, LWS_REVISION: lws_revision(lws)},
                "annotations": annotations_of(lws),
                "ownerReferences": [controller_ref(leader)],
            },
            "spec": {
                "serviceName": name_of(leader) if unique else name_of(lws),
                "replicas": size - 1,
                "podManagementPolicy": "Parallel",
                "ordinals": {"start": 1},
                "template": template,
                "selector": {"matchLabels": group},
            },
        }
    ]


def lws_pod_webhook(pod: Mapping[str, Any]) -> Obj:
    """LWS's Pod webhook Default (LWS pkg/webhooks/pod_webhook.go): group and subgroup labels,
    exclusive-placement affinity, the TPU variables of pkg/utils/accelerators/tpu.go (nothing when
    TPU_WORKER_ID or TPU_WORKER_HOSTNAMES is already in the first TPU container) and the LWS_*
    variables of pkg/utils/pod/pod_utils.go. Pods without the LWS name label are returned as is."""
    out = copy.deepcopy(dict(pod))
    pod_labels = meta(out).setdefault("labels", {})
    if LWS_NAME not in pod_labels:
        return out
    pod_annotations = annotations_of(out)
    size = int(pod_annotations[LWS_SIZE])
    subgroup_size = pod_annotations.get(LWS_SUBGROUP_SIZE)
    if pod_labels.get(LWS_WORKER_INDEX) == "0":
        pod_labels.setdefault(LWS_GROUP_INDEX, str(parent_and_ordinal(name_of(out))[1]))
        if pod_annotations.get(LWS_SUBDOMAIN_POLICY) == "UniquePerReplica":
            out["spec"]["subdomain"] = name_of(out)
        key = pod_labels.setdefault(LWS_GROUP_KEY, sha1(f"{namespace_of(out)}/{name_of(out)}"))
        if LWS_EXCLUSIVE in pod_annotations:
            _exclusive_affinity(out, key, pod_annotations[LWS_EXCLUSIVE], LWS_GROUP_KEY)
        if (
            subgroup_size
            and not pod_labels.get(LWS_SUBGROUP_INDEX)
            and pod_annotations.get(LWS_SUBGROUP_TYPE) != "LeaderExcluded"
        ):
            pod_labels[LWS_SUBGROUP_INDEX] = "0"
            pod_labels[LWS_SUBGROUP_KEY] = sha1(f"{name_of(out)}/0")
    else:
        worker_index = parent_and_ordinal(name_of(out))[1]
        pod_labels[LWS_WORKER_INDEX] = str(worker_index)
        if subgroup_size and not pod_labels.get(LWS_SUBGROUP_INDEX):
            per = int(subgroup_size)
            leader_extra = (size - 1) % per == 0 and size % per != 0
            index = str((worker_index - 1) // per if leader_extra else worker_index // per)
            pod_labels[LWS_SUBGROUP_INDEX] = index
            leader_name = pod_annotations.get(LWS_LEADER_NAME, "")
            pod_labels[LWS_SUBGROUP_KEY] = sha1(f"{leader_name}/{index}")
    if any(tpu_chips(c) for c in containers(out["spec"])):
        if subgroup_size:
            _lws_tpu_env_subgroup(out)
        else:
            _lws_tpu_env(out, size)
    _lws_env(out)
    return out


def _exclusive_affinity(pod: Obj, key_value: str, topology_key: str, label_key: str) -> None:
    affinity = pod["spec"].setdefault("affinity", {})
    affinity.setdefault("podAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", []
    ).append(
        {
            "labelSelector": {
                "matchExpressions": [{"key": label_key, "operator": "In", "values": [key_value]}]
            },
            "topologyKey": topology_key,
        }
    )
    affinity.setdefault("podAntiAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", []
    ).append(
        {
            "labelSelector": {
                "matchExpressions": [
                    {"key": label_key, "operator": "Exists"},
                    {"key": label_key, "operator": "NotIn", "values": [key_value]},
                ]
            },
            "topologyKey": topology_key,
        }
    )


def _tpu_containers(pod: Mapping[str, Any]) -> list[Obj]:
    """getContainersRequestingTPUs: containers first, then init containers."""
    return [c for c in containers(pod["spec"], "containers", "initContainers") if tpu_chips(c)]


def _lws_tpu_env(pod: Obj, size: int) -> None:
    """AddTPUVariables: hostnames leader first (when it holds chips), one entry per TPU container;
    TPU_WORKER_ID = pod index x containers + i; TPU_PROCESS_PORT 8476 + i."""
    tpu = _tpu_containers(pod)
    if any(env_value(tpu[0], n) is not None for n in ("TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID")):
        return
    pod_labels, pod_annotations = labels_of(pod), annotations_of(pod)
    subdomain = pod["spec"].get("subdomain", "")
    leader_requests = pod_annotations.get(LWS_LEADER_TPUS) == "true"
    if pod_labels.get(LWS_WORKER_INDEX) == "0":
        leader, index = name_of(pod), 0
    else:
        leader, index = parent_and_ordinal(name_of(pod))
        if not leader_requests:
            index -= 1
    ports = [env_value(c, "TPU_PROCESS_PORT") or str(8476 + i) for i, c in enumerate(tpu)]
    hosts: list[str] = []
    if leader_requests or pod_labels.get(LWS_WORKER_INDEX) == "0":
        hosts += [f"{leader}.{subdomain}"] * len(tpu)
    for i in range(1, size):
        hosts += [f"{leader}-{i}.{subdomain}"] * len(tpu)
    addresses = [f"{h}:{ports[n % len(tpu)]}" for n, h in enumerate(hosts)]
    for i, container in enumerate(tpu):
        had_port = env_value(container, "TPU_PROCESS_PORT") is not None
        env = listed(container, "env")
        env += [
            {"name": "TPU_WORKER_HOSTNAMES", "value": ",".join(hosts)},
            {"name": "TPU_WORKER_ID", "value": str(index * len(tpu) + i)},
            {"name": "TPU_NAME", "value": leader},
            {"name": "TPU_PROCESS_ADDRESSES", "value": ",".join(addresses)},
        ]
        if not had_port:
            env.append({"name": "TPU_PROCESS_PORT", "value": ports[i]})


def _lws_tpu_env_subgroup(pod: Obj) -> None:
    """addTPUVariablesSubGroup: one slice per subgroup, only the first TPU container."""
    container = _tpu_containers(pod)[0]
    if any(env_value(container, n) is not None for n in ("TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID")):
        return
    pod_labels, pod_annotations = labels_of(pod), annotations_of(pod)
    per = int(pod_annotations[LWS_SUBGROUP_SIZE])
    subgroup = int(pod_labels[LWS_SUBGROUP_INDEX])
    worker = int(pod_labels[LWS_WORKER_INDEX])
    leader_requests = pod_annotations.get(LWS_LEADER_TPUS) == "true"
    worker_id = worker % per
    if worker != 0 and not leader_requests:
        worker_id, subgroup = (worker - 1) % per, (worker - 1) // per
    port = env_value(container, "TPU_PROCESS_PORT") or "8476"
    subdomain = pod["spec"].get("subdomain", "")
    start, end = per * subgroup + 1, per * (subgroup + 1)
    hosts: list[str] = []
    leader = name_of(pod)
    if worker == 0:
        hosts.append(f"{leader}.{subdomain}")
        end -= 1
    else:
        leader = parent_and_ordinal(name_of(pod))[0]
        if leader_requests and subgroup == 0:
            end -= 1
            hosts.append(f"{leader}.{subdomain}")
        elif leader_requests:
            start, end = start - 1, end - 1
    hosts += [f"{leader}-{i}.{subdomain}" for i in range(start, end + 1)]
    had_port = env_value(container, "TPU_PROCESS_PORT") is not None
    env = listed(container, "env")
    env += [
        {"name": "TPU_WORKER_HOSTNAMES", "value": ",".join(hosts)},
        {"name": "TPU_WORKER_ID", "value": str(worker_id)},
        {"name": "TPU_NAME", "value": leader},
        {"name": "TPU_PROCESS_ADDRESSES", "value": ",".join(f"{h}:{port}" for h in hosts)},
    ]
    if not had_port:
        env.append({"name": "TPU_PROCESS_PORT", "value": port})


def _lws_env(pod: Obj) -> None:
    """AddLWSVariables: LWS_LEADER_ADDRESS, LWS_GROUP_SIZE, LWS_WORKER_INDEX first in every
    container, replacing entries of the same name."""
    pod_labels = labels_of(pod)
    first = [
        {
            "name": "LWS_LEADER_ADDRESS",
            "value": f"{pod_labels[LWS_NAME]}-{pod_labels[LWS_GROUP_INDEX]}."
            f"{pod['spec'].get('subdomain', '')}.{namespace_of(pod)}",
        },
        {"name": "LWS_GROUP_SIZE", "value": annotations_of(pod)[LWS_SIZE]},
        {"name": "LWS_WORKER_INDEX", "value": pod_labels[LWS_WORKER_INDEX]},
    ]
    names = {item["name"] for item in first}
    for container in containers(pod["spec"]):
        rest = [item for item in container.get("env") or [] if item.get("name") not in names]
        container["env"] = copy.deepcopy(first) + rest


# ---- KubeRay ---------------------------------------------------------------------------------


def ray_owned_cluster(owner: Mapping[str, Any]) -> Obj:
    """KUBERAY ray-operator/controllers/ray/rayjob_controller.go constructRayClusterForRayJob and
    rayservice_controller.go constructRayClusterForRayService: a RayCluster `<name>-<5 random>`."""
    if owner["kind"] == "RayJob" and owner["spec"].get("suspend"):
        return {}
    key = "rayClusterSpec" if owner["kind"] == "RayJob" else "rayClusterConfig"
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": f"{name_of(owner)}-{stand_in(name_of(owner))}",
            "namespace": namespace_of(owner),
            "labels": {
                **labels_of(owner),
                "ray.io/originated-from-cr-name": name_of(owner),
                "ray.io/originated-from-crd": owner["kind"],
            },
            "annotations": annotations_of(owner),
            "ownerReferences": [controller_ref(owner)],
        },
        "spec": copy.deepcopy(owner["spec"][key]),
    }


def raycluster_pods(cluster: Mapping[str, Any]) -> list[Obj]:
    """KUBERAY ray-operator/controllers/ray/raycluster_controller.go buildHeadPod/buildWorkerPod and
    common/pod.go DefaultHeadPodTemplate/DefaultWorkerPodTemplate/BuildPod: the head Pod and
    replicas x numOfHosts worker Pods, created directly and owned by the RayCluster. Workers get the
    `wait-gcs-ready` init container, the metrics port 8080, /dev/shm, Ray's env and, for multi-host
    groups, the RayMultiHostIndexing labels (on by default from 1.6, alpha and off in 1.5.0)."""
    spec = cluster["spec"]
    served = labels_of(cluster).get("ray.io/originated-from-crd") == "RayService"
    head = _ray_pod(cluster, spec["headGroupSpec"]["template"], "head", "headgroup", served)
    pods = [head]
    for group in spec.get("workerGroupSpecs") or []:
        hosts = int(group.get("numOfHosts", 1))
        for replica in range(int(group.get("replicas", 0))):
            replica_name = f"{group['groupName']}-{stand_in(f'{name_of(cluster)}/{replica}')}"
            for host in range(hosts):
                pod = _ray_pod(cluster, group["template"], "worker", group["groupName"], served)
                pod_labels = meta(pod)["labels"]
                pod_labels[RAY_REPLICA_INDEX] = str(replica)
                if hosts > 1:
                    pod_labels[RAY_REPLICA_NAME] = replica_name
                    pod_labels[RAY_HOST_INDEX] = str(host)
                pods.append(pod)
    return pods


def _ray_pod(
    cluster: Mapping[str, Any], template: Mapping[str, Any], node: str, group: str, served: bool
) -> Obj:
    pod = pod_from_template(template, cluster)
    name = name_of(cluster)
    prefix = name if node == "head" else f"{name}-{group}"
    meta(pod)["generateName"] = f"{prefix[:50]}-{node}-".lower()
    base = {
        "ray.io/is-ray-node": "yes",
        RAY_CLUSTER: name,
        "ray.io/node-type": node,
        RAY_GROUP: group,
        "ray.io/identifier": f"{name}-{node}",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    for key, value in labels_of(pod).items():
        if key not in ("ray.io/node-type", RAY_GROUP, RAY_CLUSTER):
            base[key] = value
    if served:
        base["ray.io/serve"] = "false" if node == "head" else "true"
    meta(pod)["labels"] = base
    ray = pod["spec"]["containers"][0]
    fqdn = f"{name}-head-svc.{namespace_of(cluster)}.svc.cluster.local"
    if node == "worker":
        listed(pod["spec"], "initContainers").append(
            {
                "name": "wait-gcs-ready",
                "image": ray.get("image"),
                "command": ["/bin/bash", "-c", "--"],
                "args": [f"until ray health-check --address {fqdn}:6379; do sleep 5; done"],
                "env": copy.deepcopy(ray.get("env") or []),
                "volumeMounts": copy.deepcopy(ray.get("volumeMounts") or []),
                "resources": {
                    "limits": {"cpu": "200m", "memory": "256Mi"},
                    "requests": {"cpu": "200m", "memory": "256Mi"},
                },
            }
        )
        if not any(p.get("name") == "metrics" for p in ray.get("ports") or []):
            listed(ray, "ports").append({"name": "metrics", "containerPort": 8080})
    if not any(m.get("mountPath") == "/dev/shm" for m in ray.get("volumeMounts") or []):
        volumes = listed(pod["spec"], "volumes")
        if not any(v.get("name") == "shared-mem" for v in volumes):
            volumes.append({"name": "shared-mem", "emptyDir": {"medium": "Memory"}})
        listed(ray, "volumeMounts").append({"name": "shared-mem", "mountPath": "/dev/shm"})
    env = listed(ray, "env")
    ip = fqdn if node == "worker" else "127.0.0.1"
    if node == "worker":
        env += [
            {"name": "FQ_RAY_IP", "value": fqdn},
            {"name": "RAY_IP", "value": f"{name}-head-svc"},
        ]
    for key, path in (
        ("RAY_CLUSTER_NAME", f"metadata.labels['{RAY_CLUSTER}']"),
        ("RAY_CLUSTER_NAMESPACE", "metadata.namespace"),
        ("RAY_CLOUD_INSTANCE_ID", "metadata.name"),
        ("RAY_NODE_TYPE_NAME", f"metadata.labels['{RAY_GROUP}']"),
    ):
        env.append({"name": key, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    env.append({"name": "KUBERAY_GEN_RAY_START_CMD", "value": f"ray start --address={ip}:6379"})
    for key, value in (
        ("RAY_PORT", "6379"),
        ("RAY_ADDRESS", f"{ip}:6379"),
        ("RAY_USAGE_STATS_KUBERAY_IN_USE", "1"),
        ("RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "1"),
    ):
        if env_value(ray, key) is None:
            env.append({"name": key, "value": value})
    return pod


def kuberay_tpu_webhook(pod: Mapping[str, Any]) -> Obj:
    """KubeRay's TPU webhook mutatePod (KUBERAY_TPU main.go), for Pods of KubeRay
    (objectSelector app.kubernetes.io/name: kuberay) with chips: hosts = topology chips / chips of
    the Pod; for multi-host, hostname `<group>-<replica>-<host>` and subdomain `<cluster>-headless`;
    per TPU container TPU_WORKER_HOSTNAMES (one per host, also on tpu7x), TPU_WORKER_ID (per
    container on tpu7x), TPU_NAME, tpu7x TPU_PROCESS_ADDRESSES/PORT (8471 + i), the device plugin
    address, and MEGASCALE_* when MEGASCALE_NUM_SLICES is set. Values already set are kept (an
    unset or "localhost" hostname list and a default id are replaced, as the webhook does)."""
    out = copy.deepcopy(dict(pod))
    pod_labels = labels_of(out)
    tpu = [c for c in out["spec"].get("containers") or [] if tpu_chips(c)]
    if pod_labels.get("app.kubernetes.io/name") != "kuberay" or not tpu:
        return out
    cluster, group = pod_labels[RAY_CLUSTER], pod_labels[RAY_GROUP]
    selector = out["spec"].get("nodeSelector") or {}
    topology = selector[TOPOLOGY]  # the webhook fails the Pod without it
    chips = 1
    for dim in topology.split("x"):
        chips *= int(dim)
    hosts = max(chips // sum(tpu_chips(c) for c in tpu), 1)
    tpu7x = str(selector.get(ACCELERATOR, "")).startswith("tpu7x")
    replica = int(pod_labels.get(RAY_REPLICA_INDEX, "0"))
    host = int(pod_labels.get(RAY_HOST_INDEX, "0"))
    service = f"{cluster}-headless"
    names = [f"{group}-{replica}-{h}.{service}" for h in range(hosts)]
    if hosts > 1:
        out["spec"]["hostname"] = f"{group}-{replica}-{host}"
        out["spec"]["subdomain"] = service
    for i, container in enumerate(tpu):
        env = listed(container, "env")

        def add(name: str, value: str, env: list[Obj] = env) -> None:
            env.append({"name": name, "value": value})

        if env_value(container, "MEGASCALE_NUM_SLICES") is not None:
            if not env_value(container, "MEGASCALE_SLICE_ID"):
                add("MEGASCALE_SLICE_ID", str(replica))
            if not env_value(container, "MEGASCALE_COORDINATOR_ADDRESS"):
                coordinator = f"{group}-0-0.{service}"
                add(
                    "MEGASCALE_COORDINATOR_ADDRESS", f"{coordinator}:8081" if tpu7x else coordinator
                )
            if not env_value(container, "MEGASCALE_PORT"):
                add("MEGASCALE_PORT", str(8081 + i if tpu7x else 8081))
        if hosts > 1:
            if env_value(container, "TPU_WORKER_HOSTNAMES") in (None, "", "localhost"):
                add("TPU_WORKER_HOSTNAMES", ",".join(names))
            if tpu7x:
                addresses = ",".join(f"{n}:{8471 + c}" for n in names for c in range(len(tpu)))
                if "localhost" in (env_value(container, "TPU_PROCESS_ADDRESSES") or "localhost"):
                    add("TPU_PROCESS_ADDRESSES", addresses)
                if not env_value(container, "TPU_PROCESS_PORT"):
                    add("TPU_PROCESS_PORT", str(8471 + i))
        worker_id = host * len(tpu) + i if tpu7x else host
        present = env_value(container, "TPU_WORKER_ID")
        if not present or (present == str(i) and present != str(worker_id)):
            add("TPU_WORKER_ID", str(worker_id))
        if not env_value(container, "TPU_NAME"):
            add("TPU_NAME", f"{group}-{replica}")
        if env_value(container, "TPU_DEVICE_PLUGIN_HOST_IP") is None:
            env.append(
                {
                    "name": "TPU_DEVICE_PLUGIN_HOST_IP",
                    "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}},
                }
            )
        if not env_value(container, "TPU_DEVICE_PLUGIN_ADDR"):
            add("TPU_DEVICE_PLUGIN_ADDR", "$(TPU_DEVICE_PLUGIN_HOST_IP):2112")
    return out


# ---- Kueue -----------------------------------------------------------------------------------


def kueue_queued(obj: Mapping[str, Any]) -> bool:
    return QUEUE_LABEL in labels_of(obj)


def kueue_suspend(obj: Mapping[str, Any]) -> Obj:
    """Kueue's webhooks suspend a queued Job, JobSet or RayJob at CREATE
    (KUEUE pkg/controller/jobframework/defaults.go ApplyDefaultForSuspend)."""
    out = copy.deepcopy(dict(obj))
    out.setdefault("spec", {})["suspend"] = True
    return out


def kueue_admit(obj: Mapping[str, Any], node_labels: Mapping[str, str]) -> Obj:
    """The UPDATE that admits a queued workload: the ResourceFlavor's nodeLabels merged into each
    Pod template's nodeSelector, then suspend false (KUEUE pkg/controller/jobs/job/job_controller.go
    RunWithPodSetsInfo and pkg/podset/podset.go Merge). JobSet propagates the same merge into its
    suspended child Jobs when it resumes them (JOBSET pkg/controllers/jobset_controller.go
    resumeJob), so a child Job's UPDATE is this function applied to the child. Only Pod templates
    with chips get the (TPU) flavor's labels. A RayJob is only unsuspended."""
    out = copy.deepcopy(dict(obj))
    spec = out["spec"]
    kind = group_kind(out)
    templates: list[Obj] = []
    if kind == ("batch", "Job"):
        templates = [spec["template"]]
    elif kind == ("jobset.x-k8s.io", "JobSet"):
        templates = [r["template"]["spec"]["template"] for r in spec.get("replicatedJobs") or []]
    for template in templates:
        # a Pod set without chips gets another flavor (CPU), whose labels are not modelled here
        if any(tpu_chips(c) for c in containers(template.get("spec") or {})):
            selector = template.setdefault("spec", {}).setdefault("nodeSelector", {})
            selector.update(node_labels)
    spec["suspend"] = False
    return out
