"""Kubernetes' own controllers: the Job, StatefulSet, Deployment and ReplicaSet controllers and the
Job defaulting of the API server (read at K8S, see common.py)."""

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
