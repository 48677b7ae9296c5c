"""`kubectl tpu why` on the one-node cluster, with the real scheduler.

The node (tests/support/node.py) is labelled as one host of a tpu-v6e-slice 2x4 node pool
"v6e-2x4" (a ct6e-standard-4t VM, 4 chips, `google.com/tpu: 4` advertised), which is what
tpu-webhook reads as the shapes this cluster offers. A Pod that asks for a shape the
node is not stays Pending: the real kube-scheduler records PodScheduled=False (Unschedulable)
and a FailedScheduling Event, and `kubectl tpu why` (the real kubectl's plugin discovery) joins
them with what the webhook sees. No tpu-webhook is registered: the objects are stored as
written, as in a cluster where it was not installed yet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dev.tools import REPO_ROOT, tools_dir
from tests.support.node import ClusterNode

pytestmark = [pytest.mark.e2e, pytest.mark.debian, pytest.mark.timeout(600)]

SCRIPTS = os.path.dirname(sys.executable)  # kubectl-tpu of this venv
V6E_2X4_HOST = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
    "cloud.google.com/gke-tpu-topology": "2x4",
    "cloud.google.com/gke-accelerator-count": "4",
    "cloud.google.com/gke-nodepool": "v6e-2x4",
}
POOL = 'tpu-v6e-slice 2x4 (node pool "v6e-2x4" (1 node))'
NO_MATCH = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."


@pytest.fixture(scope="module")
def node(debian_packages: None) -> Iterator[ClusterNode]:
    """The one-node cluster as one host of a v6e 2x4 pool; stopped after this module."""
    cluster = ClusterNode(tools_dir(), labels=V6E_2X4_HOST, tpu_chips=4)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def namespace(node: ClusterNode) -> Iterator[str]:
    name = f"why-{uuid.uuid4().hex[:8]}"
    node.kubectl("create", "namespace", name, check=True)
    node.wait_for(
        f"ServiceAccount {name}/default",
        lambda: node.kubectl("get", "sa", "default", "-n", name).returncode == 0,
    )
    yield name
    node.kubectl("delete", "namespace", name, "--wait=false")


def pod_spec(topology: str, chips: int) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "nodeSelector": {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
            "cloud.google.com/gke-tpu-topology": topology,
        },
        "containers": [
            {
                "name": "main",
                "image": "localhost/tpu-webhook-e2e/pause:1",
                "imagePullPolicy": "Never",
                "resources": {"limits": {"google.com/tpu": str(chips)}},
            }
        ],
    }


def create(node: ClusterNode, namespace: str, obj: dict[str, Any]) -> None:
    node.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj), check=True)


def failed_scheduling(node: ClusterNode, namespace: str, pod: str) -> str:
    """The scheduler's FailedScheduling message about `pod`, once there is one."""

    def probe() -> str:
        got = node.kubectl(
            "get", "events", "-n", namespace, "-o", "json",
            "--field-selector", f"involvedObject.name={pod},reason=FailedScheduling",
        )  # fmt: skip
        items = json.loads(got.stdout or "{}").get("items") or []
        return str(items[0]["message"]) if items else ""

    return str(node.wait_for(f"FailedScheduling of {pod}", probe, timeout=90))


def pods_of(node: ClusterNode, namespace: str) -> list[dict[str, Any]]:
    got = node.kubectl("get", "pods", "-n", namespace, "-o", "json", check=True)
    return list(json.loads(got.stdout)["items"])


def kubectl_tpu(node: ClusterNode, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.pathsep.join([SCRIPTS, str(tools_dir()), "/usr/bin", "/bin"]),
        "HOME": os.environ.get("HOME", "/root"),
        "KUBECONFIG": str(node.cp.kubeconfig),
    }
    return subprocess.run(
        [str(tools_dir() / "kubectl"), "tpu", *args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_why_explains_a_pod_that_asks_a_shape_no_node_has(
    node: ClusterNode, namespace: str
) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "v6e-2x2"}}
    create(node, namespace, pod | {"spec": pod_spec("2x2", 4)})
    assert failed_scheduling(node, namespace, "v6e-2x2").startswith(NO_MATCH)

    why = kubectl_tpu(node, "why", "pod/v6e-2x2", "-n", namespace)
    lines = why.stdout.splitlines()
    assert (why.returncode, why.stderr) == (0, "")
    assert lines[0] == f"Pod {namespace}/v6e-2x2: Pending"
    assert "TPU:      asks tpu-v6e-slice 2x2 = 4 chips at 4 per host needs 1 host" in lines
    assert f"Cluster:  offers {POOL}" in lines
    assert "Webhook:  admits it, with warnings" in lines
    assert (
        "  warning [tpu.shape-not-offered] spec.nodeSelector[cloud.google.com/gke-tpu-topology]: "
        f'Invalid value: "2x2": this cluster shows no tpu-v6e-slice 2x2 nodes; it offers {POOL}; '
        "the nearest fit offered is tpu-v6e-slice 2x4."
    ) in "\n".join(lines)
    assert any(
        line.startswith(f"  PodScheduled=False (Unschedulable): {NO_MATCH}") for line in lines
    )
    events = lines.index("Events (newest first):")
    assert " Warning  FailedScheduling  pod/v6e-2x2  0/1 nodes are available" in lines[events + 1]
    (why_line,) = [line for line in lines if line.startswith("Why: ")]
    assert why_line == (
        f"Why: the cluster offers {POOL}; this Pod asks tpu-v6e-slice 2x2; the scheduler: "
        + NO_MATCH
    )
    assert lines[-1] == (
        "Fix: ask for a shape the cluster has, or add a node pool of tpu-v6e-slice 2x2 (nodes "
        "appear without one only with node auto-provisioning)"
    )


def test_why_follows_a_job_to_its_pending_pods(node: ClusterNode, namespace: str) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "v6e-4x4"},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": 4,
            "completions": 4,
            "template": {"spec": pod_spec("4x4", 4) | {"subdomain": "v6e-4x4"}},
        },
    }
    create(node, namespace, job)
    node.wait_for("the Job's 4 Pods", lambda: len(pods_of(node, namespace)) == 4)
    pods = pods_of(node, namespace)
    for pod in pods:
        assert failed_scheduling(node, namespace, pod["metadata"]["name"]).startswith(NO_MATCH)

    why = kubectl_tpu(node, "why", "job/v6e-4x4", "-n", namespace)
    lines = why.stdout.splitlines()
    assert (why.returncode, why.stderr) == (0, "")
    assert lines[0] == f"Job {namespace}/v6e-4x4: 4 Pods: 4 Pending"
    assert "TPU:      asks tpu-v6e-slice 4x4 = 16 chips at 4 per host needs 4 hosts" in lines
    assert any("FailedScheduling  pod/v6e-4x4-" in line for line in lines)
    (why_line,) = [line for line in lines if line.startswith("Why: ")]
    assert why_line == (
        f"Why: the cluster offers {POOL}; its Pods ask tpu-v6e-slice 4x4; the scheduler: "
        + NO_MATCH
    )
    (status,) = [line for line in lines if "PodScheduled" in line]  # said once for the 4
    assert status.startswith("  pod/v6e-4x4-")
    assert f" and 3 more: PodScheduled=False (Unschedulable): {NO_MATCH}" in status


def test_why_explains_a_crash_looping_pod(node: ClusterNode, namespace: str) -> None:
    """A v6e 2x4 host Pod on the node that offers it; its container exits at once (the printenv
    image) and restartPolicy Always restarts it: the kubelet backs off (CrashLoopBackOff)."""
    spec = pod_spec("2x4", 4) | {"restartPolicy": "Always"}
    container = spec["containers"][0]
    container["image"] = "localhost/tpu-webhook-e2e/printenv:1"
    container["env"] = [
        {"name": "TPU_WORKER_ID", "value": "0"},
        {"name": "TPU_WORKER_HOSTNAMES", "value": "host-0.train,host-1.train"},
    ]
    create(
        node,
        namespace,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "loop"}, "spec": spec},
    )

    def backing_off() -> bool:
        """In a back-off of 20 s or more (the second restart on): `why` reads it waiting."""
        got = node.kubectl("get", "pod", "loop", "-n", namespace, "-o", "json", check=True)
        statuses = json.loads(got.stdout)["status"].get("containerStatuses") or []
        waiting = statuses[0]["state"].get("waiting", {}) if statuses else {}
        restarts = statuses[0].get("restartCount", 0) if statuses else 0
        return waiting.get("reason") == "CrashLoopBackOff" and restarts >= 2

    node.wait_for("CrashLoopBackOff of pod/loop", backing_off, timeout=180)
    why = kubectl_tpu(node, "why", "loop", "-n", namespace)
    lines = why.stdout.splitlines()
    assert (why.returncode, why.stderr) == (0, "")
    assert lines[0] == f"Pod {namespace}/loop: Running"
    assert f"Cluster:  offers {POOL}" in lines
    assert "Webhook:  admits it" in lines
    (status,) = [line for line in lines if line.startswith("  container ")]
    assert status.startswith("  container main: CrashLoopBackOff, ")
    assert status.endswith(", last exit code 0 (Completed)")
    assert any(
        " Warning  BackOff  pod/loop  Back-off restarting failed container" in line
        for line in lines
    )
    (why_line,) = [line for line in lines if line.startswith("Why: ")]
    assert why_line.startswith("Why: container main of Pod loop is in CrashLoopBackOff: restarted ")
    assert why_line.endswith(", last exit code 0 (Completed)")
    assert lines[-1] == "Fix: its log says why: kubectl logs loop -c main --previous"
