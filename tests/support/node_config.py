"""What the one-node cluster is made of, as data: names, the TPU node, and the configuration
files of containerd, the CNI bridge, the kubelet and the API server's admission plugins.

The settings are the ones recorded as working on these machines (2-core VM, cgroup v1, root, no
CAP_SYS_RESOURCE in the bounding set); tests/support/node.py writes them and starts the
processes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from dev.components import SERVICE_CLUSTER_IP_RANGE

NODE_NAME = "tpu-e2e-node"
TPU_LABELS = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice",
    "cloud.google.com/gke-tpu-topology": "2x2x4",
}
TPU_RESOURCE = "google.com/tpu"
TPU_CHIPS = 16  # four v4 hosts' worth: the seed Job's 4 Pods x 4 chips all fit this one node
#: A node of a pool GKE gives to the TPU DRA driver: one ct6e-standard-4t host (4 chips) of a
#: v6e 4x4 slice. GKE's TPU labels, the chip count the driver reads from
#: `cloud.google.com/gke-accelerator-count`, and the label that turns GKE's TPU device plugin
#: off (so no google.com/tpu is advertised): kubernetes-sigs/dra-driver-google-tpu
#: cmd/tpu-dra-kubeletplugin/util.go and demo/clusters/gke/create-tpu-cluster-for-dra.sh.
DRA_NODE_LABELS = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
    "cloud.google.com/gke-tpu-topology": "4x4",
    "cloud.google.com/gke-accelerator-count": "4",
    "cloud.google.com/gke-tpu-dra-driver": "true",
}
PAUSE_IMAGE = "localhost/tpu-webhook-e2e/pause:1"
PRINTENV_IMAGE = "localhost/tpu-webhook-e2e/printenv:1"
POD_SUBNET = "10.244.0.0/24"  # inside this machine only: a bridge and netns made by this node
BRIDGE = "tpuwh0"
CTR_NAMESPACE = "k8s.io"
CNI_BIN_DIR = "/usr/lib/cni"

#: Debian packages the node needs (make setup installs them: tests/tools/debian.sh), by a file
#: each one ships.
DEBIAN_TOOLS = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    f"{CNI_BIN_DIR}/bridge": "containernetworking-plugins",
}


# GKE's limit on the system-* priority classes (documented by Kubernetes as "limit priority
# class consumption by default"): such Pods need a ResourceQuota for them in their namespace.
ADMISSION_CONFIG = {
    "apiVersion": "apiserver.config.k8s.io/v1",
    "kind": "AdmissionConfiguration",
    "plugins": [
        {
            "name": "ResourceQuota",
            "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "ResourceQuotaConfiguration",
                "limitedResources": [
                    {
                        "resource": "pods",
                        "matchScopes": [
                            {
                                "scopeName": "PriorityClass",
                                "operator": "In",
                                "values": ["system-node-critical", "system-cluster-critical"],
                            }
                        ],
                    }
                ],
            },
        }
    ],
}


def missing_debian_tools() -> list[str]:
    """Debian packages whose commands are absent (empty when the node can start)."""
    return sorted(
        {pkg for cmd, pkg in DEBIAN_TOOLS.items() if not (shutil.which(cmd) or Path(cmd).exists())}
    )


def eth0_ipv4() -> str:
    """The machine's eth0 IPv4 address: the kubelet's --node-ip (loopback is refused)."""
    out = subprocess.run(
        ["ip", "-j", "-4", "addr", "show", "dev", "eth0"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    for link in json.loads(out):
        for addr in link.get("addr_info", []):
            if addr.get("family") == "inet":
                return str(addr["local"])
    raise RuntimeError("eth0 has no IPv4 address for --node-ip")


def cni_config(ipam_dir: Path) -> dict[str, Any]:
    """A bridge network for the Pods; no masquerading (nothing leaves the machine)."""
    return {
        "cniVersion": "0.4.0",
        "name": "tpu-webhook-e2e",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    # Service addresses go to the node (the bridge), as a cluster's Pods send
                    # them to kube-proxy's rules; tests/support/kubernetes_service.py answers
                    # the `kubernetes` Service there.
                    "routes": [{"dst": SERVICE_CLUSTER_IP_RANGE}],
                    "dataDir": str(ipam_dir),
                },
            }
        ],
    }


def containerd_config(root: Path, socket: Path, cni_conf_dir: Path) -> str:
    """containerd 1.6 (config version 2): its own root, state and socket; CRI with runc."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # The VM's bounding set lacks CAP_SYS_RESOURCE: a negative oom_score_adj cannot be set, and
  # without this every sandbox fails ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  enable_selinux = false
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf_dir}"
"""


def kubelet_config(workdir: Path, node_ip: str, socket: Path) -> dict[str, Any]:
    """KubeletConfiguration: cgroup v1 with cgroupfs, client-certificate authentication only."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # 1.35 refuses cgroup v1 otherwise
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{socket}",
        "address": node_ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(workdir / "pki" / "node-ca.crt")},
        },
        "authorization": {"mode": "AlwaysAllow"},  # only node-CA clients get this far
        "podLogsDir": str(workdir / "pod-logs"),
        "clusterDomain": "cluster.local",
        "makeIPTablesUtilChains": False,
        "registerNode": True,
        "rotateCertificates": False,
        "serializeImagePulls": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "nodeStatusUpdateFrequency": "4s",
        "syncFrequency": "10s",
    }
