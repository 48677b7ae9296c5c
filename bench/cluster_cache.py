"""`python -m bench --cluster-cache NODES,CLASSES`: the webhook reads a populated cluster.

A real API server (dev.controlplane, pinned to the load core) holds NODES TPU Nodes, spread
over node pools of the shapes GKE sells (the corpus reviews' among them, so their verdicts do
not change), and CLASSES ComputeClasses with TPU priorities. Our servers run with
`clusterObjects` on (the chart's default) and a kubeconfig of that API server; the load starts
once the server's /metrics says it holds every Node and class. Nodes carry the labels a GKE TPU
node has (about 30), so the list the server reads is the size of a real one.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.procs import HOST, Server, client_context
from dev.controlplane import ControlPlane

CRD = Path(__file__).resolve().parent.parent / "tests" / "e2e" / "data" / "computeclass-crd.yaml"
# (accelerator, topology, chips per node, machine type): node pools of these shapes, in turn
POOLS = (
    ("tpu-v4-podslice", "2x2x4", 4, "ct4p-hightpu-4t"),
    ("tpu-v5-lite-podslice", "2x4", 8, "ct5lp-hightpu-8t"),
    ("tpu-v5-lite-podslice", "4x4", 4, "ct5lp-hightpu-4t"),
    ("tpu-v5p-slice", "4x4x4", 4, "ct5p-hightpu-4t"),
    ("tpu-v6e-slice", "2x4", 8, "ct6e-standard-8t"),
    ("tpu-v6e-slice", "8x8", 4, "ct6e-standard-4t"),
    ("tpu7x", "4x4x4", 4, "tpu7x-standard-4t"),
)
NODES_PER_POOL = 16


def node(index: int) -> dict[str, Any]:
    accelerator, topology, chips, machine = POOLS[(index // NODES_PER_POOL) % len(POOLS)]
    pool = f"{accelerator}-{topology}-{index // (NODES_PER_POOL * len(POOLS))}"
    name = f"gke-bench-{pool}-{index:05d}"
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": machine,
        "beta.kubernetes.io/os": "linux",
        "cloud.google.com/gke-accelerator-count": str(chips),
        "cloud.google.com/gke-boot-disk": "pd-balanced",
        "cloud.google.com/gke-container-runtime": "containerd",
        "cloud.google.com/gke-cpu-scaling-level": "224",
        "cloud.google.com/gke-logging-variant": "DEFAULT",
        "cloud.google.com/gke-max-pods-per-node": "110",
        "cloud.google.com/gke-nodepool": pool,
        "cloud.google.com/gke-os-distribution": "cos",
        "cloud.google.com/gke-placement-group": f"{pool}-placement",
        "cloud.google.com/gke-provisioning": "standard",
        "cloud.google.com/gke-stack-type": "IPV4",
        "cloud.google.com/gke-tpu-accelerator": accelerator,
        "cloud.google.com/gke-tpu-topology": topology,
        "cloud.google.com/machine-family": machine.split("-")[0],
        "cloud.google.com/private-node": "false",
        "failure-domain.beta.kubernetes.io/region": "us-east5",
        "failure-domain.beta.kubernetes.io/zone": "us-east5-b",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": machine,
        "topology.gke.io/zone": "us-east5-b",
        "topology.kubernetes.io/region": "us-east5",
        "topology.kubernetes.io/zone": "us-east5-b",
    }
    taint = {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}
    spec = {
        "unschedulable": True,
        "taints": [taint],
        "podCIDR": f"10.{index // 250}.{index % 250}.0/24",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def compute_class(index: int) -> dict[str, Any]:
    priorities = [
        {"tpu": {"type": accelerator, "count": chips, "topology": topology}}
        for accelerator, topology, chips, _ in POOLS[index % len(POOLS) :][:3]
    ]
    return {
        "apiVersion": "cloud.google.com/v1",
        "kind": "ComputeClass",
        "metadata": {"name": f"bench-class-{index:03d}"},
        "spec": {"priorities": priorities, "nodePoolAutoCreation": {"enabled": True}},
    }


@contextmanager
def populated(nodes: int, classes: int) -> Iterator[dict[str, str]]:
    """A control plane holding the Nodes and classes; the environment that makes a webhook
    server read it."""
    with ControlPlane() as cp:
        cp.kubectl("apply", "-f", str(CRD), check=True)
        cp.kubectl("wait", "--for=condition=Established", "crd/computeclasses.cloud.google.com",
                   "--timeout=60s", check=True)  # fmt: skip
        for start in range(0, nodes, 250):
            batch = [node(i) for i in range(start, min(nodes, start + 250))]
            listed = {"apiVersion": "v1", "kind": "List", "items": batch}
            cp.kubectl("create", "-f", "-", input=json.dumps(listed), check=True)
        if classes:
            listed = {
                "apiVersion": "v1",
                "kind": "List",
                "items": [compute_class(i) for i in range(classes)],
            }
            cp.kubectl("create", "-f", "-", input=json.dumps(listed), check=True)
        yield {
            "TPU_WEBHOOK_CLUSTER_OBJECTS": "true",
            "TPU_WEBHOOK_KUBECONFIG": str(cp.kubeconfig),
            "TPU_WEBHOOK_LOG_LEVEL": "warning",
        }


def wait_until_read(server: Server, nodes: int, classes: int, timeout: float = 60) -> None:
    """Until the server's /metrics counts every Node and class (its first pass is done)."""
    wanted = {'kind="Node"} ' + f"{float(nodes)}", 'kind="ComputeClass"} ' + f"{float(classes)}"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        connection = http.client.HTTPSConnection(
            HOST, server.port, context=client_context(server.certs)
        )
        try:
            connection.request("GET", "/metrics")
            text = connection.getresponse().read().decode()
        finally:
            connection.close()
        if all(any(line.endswith(w) for line in text.splitlines()) for w in wanted):
            return
        time.sleep(0.2)
    raise RuntimeError(
        f"{server.name} did not read {nodes} Nodes and {classes} classes in {timeout}s"
    )
