"""KubeRay and GKE's KubeRay TPU webhook (read at KUBERAY and KUBERAY_TPU, see common.py): the CRD
defaults, the RayCluster a RayJob or RayService creates, the Pods of a RayCluster, and the TPU
variables the webhook writes."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tests.corpus.controllers.common import (
    ACCELERATOR,
    TOPOLOGY,
    Obj,
    annotations_of,
    controller_ref,
    env_value,
    labels_of,
    listed,
    meta,
    name_of,
    namespace_of,
    stand_in,
    tpu_chips,
)
from tests.corpus.controllers.kubernetes import pod_from_template

RAY_CLUSTER = "ray.io/cluster"
RAY_GROUP = "ray.io/group"
RAY_REPLICA_INDEX = "ray.io/worker-group-replica-index"
RAY_REPLICA_NAME = "ray.io/worker-group-replica-name"
RAY_HOST_INDEX = "ray.io/replica-host-index"


def cluster_spec_of(obj: Mapping[str, Any]) -> Obj:
    """The RayCluster spec of a RayCluster, RayJob (rayClusterSpec) or RayService
    (rayClusterConfig)."""
    key = {"RayJob": "rayClusterSpec", "RayService": "rayClusterConfig"}.get(obj["kind"])
    found: Obj = obj["spec"][key] if key else obj["spec"]
    return found


def default_ray_groups(cluster_spec: Obj) -> None:
    """KubeRay CRD defaults (KUBERAY ray-operator/apis/ray/v1/raycluster_types.go)."""
    for group in cluster_spec.get("workerGroupSpecs") or []:
        group.setdefault("replicas", 0)
        group.setdefault("numOfHosts", 1)


def ray_owned_cluster(owner: Mapping[str, Any]) -> Obj:
    """KUBERAY ray-operator/controllers/ray/rayjob_controller.go constructRayClusterForRayJob and
    rayservice_controller.go constructRayClusterForRayService: a RayCluster `<name>-<5 random>`."""
    if owner["kind"] == "RayJob" and owner["spec"].get("suspend"):
        return {}
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
        "spec": copy.deepcopy(cluster_spec_of(owner)),
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
