"""Objects other controllers make, and GKE's newer slice forms, through the real API server.

Each object is patched by tpu-webhook and then validated and stored (or dry-run) by the real
kube-apiserver v1.35, so a patch that yields an object the API server rejects fails here: the
LeaderWorkerSet's StatefulSets, a RayCluster's worker Pod, a two-container hostNetwork tpu7x Pod,
a sub-slice Job, and a Kueue-queued Job through the UPDATE that admits it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from ruamel.yaml import YAML

from dev.controlplane import ControlPlane
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e

INDEX = "batch.kubernetes.io/job-completion-index"
# UPDATEs have their own entry (its failurePolicy is webhook.validating.updateFailurePolicy)
DENIED_UPDATE = 'admission webhook "validate-update.tpu-webhook.io" denied the request: '
V6E_4X4 = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
    "cloud.google.com/gke-tpu-topology": "4x4",
}


def manifest(text: str) -> dict[str, Any]:
    loaded: dict[str, Any] = YAML(typ="safe", pure=True).load(text)
    return loaded


def dry_run(control_plane: ControlPlane, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    """`kubectl create --dry-run=server -o json`: the object as the API server would store it."""
    result = control_plane.kubectl(
        "create",
        "--dry-run=server",
        "-n",
        namespace,
        "-o",
        "json",
        "-f",
        "-",
        input=json.dumps(obj),
    )
    assert result.returncode == 0, result.stderr
    stored: dict[str, Any] = json.loads(result.stdout)
    return stored


def env_names(container: dict[str, Any]) -> list[str]:
    return [e["name"] for e in container.get("env", [])]


def lws_statefulset(name: str, replicas: int, owner: dict[str, Any]) -> dict[str, Any]:
    """A StatefulSet as LeaderWorkerSet v0.8 makes it: owned by the LWS (leader) or by the
    group's leader Pod (workers), no TPU variables (LWS's Pod webhook writes them per Pod)."""
    labels = {"leaderworkerset.sigs.k8s.io/name": "vllm"}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": labels, "ownerReferences": [owner]},
        "spec": {
            "replicas": replicas,
            "serviceName": "vllm",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": V6E_4X4,
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-tpu:latest",
                            "resources": {"limits": {"google.com/tpu": "4"}},
                        }
                    ],
                },
            },
        },
    }


def test_leaderworkerset_statefulsets_are_stored_without_worker_variables(
    control_plane: ControlPlane, namespace: str
) -> None:
    lws_owner = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": "vllm",
        "uid": "6f1c1b1e-0000-4000-8000-000000000001",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    pod_owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "vllm-0",
        "uid": "6f1c1b1e-0000-4000-8000-000000000002",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    # 2 groups of a 4-host slice: the leader StatefulSet has 2 replicas, each worker one 3
    for obj in (lws_statefulset("vllm", 2, lws_owner), lws_statefulset("vllm-0", 3, pod_owner)):
        stored = dry_run(control_plane, namespace, obj)
        (container,) = stored["spec"]["template"]["spec"]["containers"]
        assert env_names(container) == []  # LWS writes none of its own once one is present
        assert [p["containerPort"] for p in container["ports"]] == [8471, 8431]
        assert container["resources"]["requests"] == {"google.com/tpu": "4"}


def test_raycluster_worker_pod_is_admitted_and_left_to_kuberay(
    control_plane: ControlPlane, namespace: str
) -> None:
    pod = manifest(
        """
apiVersion: v1
kind: Pod
metadata:
  name: raycluster-tpu-tpu-group-worker-abcde
  labels: {ray.io/cluster: raycluster-tpu, ray.io/group: tpu-group, ray.io/node-type: worker}
  ownerReferences:
    - apiVersion: ray.io/v1
      kind: RayCluster
      name: raycluster-tpu
      uid: 0b7e9c60-0000-4000-8000-000000000003
      controller: true
      blockOwnerDeletion: true
spec:
  nodeSelector:
    cloud.google.com/gke-tpu-accelerator: tpu-v6e-slice
    cloud.google.com/gke-tpu-topology: 4x4
  containers:
    - name: ray-worker
      image: rayproject/ray:2.43.0-py310
      resources: {requests: {google.com/tpu: "4"}, limits: {google.com/tpu: "4"}}
"""
    )
    stored = dry_run(control_plane, namespace, pod)
    (container,) = stored["spec"]["containers"]
    assert env_names(container) == []
    assert stored["metadata"]["ownerReferences"][0]["kind"] == "RayCluster"


def test_two_container_host_network_tpu7x_pod_is_accepted_by_the_api_server(
    control_plane: ControlPlane, namespace: str
) -> None:
    """Ports on both containers would be the same host port twice: the API server refuses that
    Pod after the webhook. None are added under hostNetwork."""
    pod = manifest(
        """
apiVersion: v1
kind: Pod
metadata: {name: ironwood-0}
spec:
  hostNetwork: true
  dnsPolicy: ClusterFirstWithHostNet
  nodeSelector:
    cloud.google.com/gke-tpu-accelerator: tpu7x
    cloud.google.com/gke-tpu-topology: 2x2x1
  containers:
    - {name: numa-0, image: jax, resources: {limits: {google.com/tpu: "2"}}}
    - {name: numa-1, image: jax, resources: {limits: {google.com/tpu: "2"}}}
"""
    )
    stored = dry_run(control_plane, namespace, pod)
    for container in stored["spec"]["containers"]:
        assert "ports" not in container
        assert container["resources"]["requests"] == {"google.com/tpu": "2"}


def test_sub_slice_job_pods_get_the_hostnames_of_their_own_slice(
    control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    job = manifest(
        """
apiVersion: batch/v1
kind: Job
metadata: {name: sub}
spec:
  backoffLimit: 0
  completionMode: Indexed
  parallelism: 2
  completions: 2
  template:
    metadata:
      annotations: {cloud.google.com/gke-tpu-slice-topology: 2x4}
    spec:
      subdomain: sub
      restartPolicy: Never
      nodeSelector:
        cloud.google.com/gke-tpu-accelerator: tpu-v6e-slice
        cloud.google.com/gke-tpu-topology: 4x4
      containers:
        - {name: main, image: jax, resources: {limits: {google.com/tpu: "4"}}}
"""
    )
    result = control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(job))
    assert result.returncode == 0, result.stderr
    core = client.CoreV1Api(api)
    pods = wait_for(
        lambda: (
            (p := core.list_namespaced_pod(namespace, label_selector="job-name=sub").items)
            and len(p) == 2
            and p
        )
    )
    for pod in pods:
        env = {e.name: e for e in pod.spec.containers[0].env}
        assert env["TPU_WORKER_HOSTNAMES"].value == "sub-0.sub,sub-1.sub"


QUEUED_JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: queued
  labels: {kueue.x-k8s.io/queue-name: tpu-queue}
spec:
  suspend: true
  backoffLimit: 0
  completionMode: Indexed
  parallelism: {hosts}
  completions: {hosts}
  template:
    spec:
      subdomain: queued
      restartPolicy: Never
      containers:
        - {name: main, image: jax, resources: {limits: {google.com/tpu: "4"}}}
"""


def kueue_admits(control_plane: ControlPlane, namespace: str) -> Any:
    """What Kueue does when it admits the Job: the ResourceFlavor's node labels into the
    template's nodeSelector, then suspend: false (one UPDATE here)."""
    patch = {"spec": {"suspend": False, "template": {"spec": {"nodeSelector": V6E_4X4}}}}
    return control_plane.kubectl(
        "patch", "job", "queued", "-n", namespace, "--type=merge", "-p", json.dumps(patch)
    )


def test_kueue_queued_job_is_admitted_then_checked_and_patched_when_kueue_admits_it(
    control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    job = manifest(QUEUED_JOB.replace("{hosts}", "4"))
    created = control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(job))
    assert created.returncode == 0, created.stderr
    assert (
        "Warning: spec.template.spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: "
        "Required value: spec.template.spec.containers[0] requests 4 google.com/tpu chips with "
        "no TPU type yet; it waits in Kueue queue tpu-queue"
    ) in created.stderr

    admitted = kueue_admits(control_plane, namespace)
    assert admitted.returncode == 0, admitted.stderr

    core = client.CoreV1Api(api)
    pods = wait_for(
        lambda: (
            (p := core.list_namespaced_pod(namespace, label_selector="job-name=queued").items)
            and len(p) == 4
            and p
        )
    )
    hostnames = ",".join(f"queued-{i}.queued" for i in range(4))
    for pod in pods:
        env = {e.name: e for e in pod.spec.containers[0].env}
        assert env["TPU_WORKER_ID"].value == pod.metadata.annotations[INDEX]
        assert env["TPU_WORKER_HOSTNAMES"].value == hostnames


def test_kueue_admission_that_reveals_a_host_count_mismatch_is_refused(
    control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    job = manifest(QUEUED_JOB.replace("{hosts}", "2"))
    created = control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(job))
    assert created.returncode == 0, created.stderr

    admitted = kueue_admits(control_plane, namespace)
    assert admitted.returncode != 0
    assert (
        f"{DENIED_UPDATE}[spec.parallelism: Invalid value: 2: 4x4 = 16 chips at 4 per host "
        "needs 4 hosts; set spec.parallelism and spec.completions to 4"
    ) in admitted.stderr
    stored = client.BatchV1Api(api).read_namespaced_job("queued", namespace)
    assert stored.spec.suspend is True
