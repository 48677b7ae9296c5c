"""Kubernetes' own controllers: the Job, StatefulSet, Deployment, ReplicaSet and DaemonSet
controllers and the Job defaulting of the API server (read at K8S, see common.py)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tests.corpus.controllers.common import (
    Obj,
    containers,
    controller_ref,
    env_value,
    listed,
    meta,
    name_of,
    namespace_of,
    stand_in,
    uid_of,
)

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def default_job(job: Obj) -> None:
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


DAEMON_NODE = "gke-tpu-node-0"  # a stand-in for the one node a DaemonSet's Pod is made for
DAEMON_TOLERATIONS = (  # AddOrUpdateDaemonPodTolerations, in its order
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)


def daemonset_pods(ds: Mapping[str, Any]) -> list[Obj]:
    """K8S pkg/controller/daemon/daemon_controller.go syncNodes and util/daemonset_util.go: the
    template gets the daemon tolerations (network-unavailable too with hostNetwork) and the
    controller-revision-hash and pod-template-generation labels; each node's Pod has its required
    node affinity *replaced* by one term matching the node's name
    (ReplaceDaemonSetPodNodeNameNodeAffinity: any required affinity terms of the template are
    dropped, its nodeSelector stays). One Pod, for one node (DAEMON_NODE), generateName `<ds>-`."""
    template = copy.deepcopy(ds["spec"]["template"])
    spec = template.setdefault("spec", {})
    tolerations = listed(spec, "tolerations")
    wanted = list(DAEMON_TOLERATIONS)
    if spec.get("hostNetwork"):
        wanted.append(("node.kubernetes.io/network-unavailable", "NoSchedule"))
    for key, effect in wanted:  # helper.AddOrUpdateTolerationInPodSpec: MatchToleration replaces
        entry = {"key": key, "operator": "Exists", "effect": effect}
        matches = [i for i, t in enumerate(tolerations) if same_toleration(t, entry)]
        for i in matches:
            tolerations[i] = dict(entry)
        if not matches:
            tolerations.append(entry)
    template_labels = meta(template).setdefault("labels", {})
    template_labels["controller-revision-hash"] = stand_in(name_of(ds), 10)
    template_labels["pod-template-generation"] = "1"
    node_term = {
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": [DAEMON_NODE]}]
    }
    node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    required["nodeSelectorTerms"] = [node_term]
    pod = pod_from_template(template, ds)
    meta(pod)["generateName"] = f"{name_of(ds)}-"
    return [pod]


def same_toleration(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """core/v1 Toleration.MatchToleration: key, operator, value and effect equal."""
    return all(
        (one.get(f) or "") == (other.get(f) or "") for f in ("key", "operator", "value", "effect")
    )
