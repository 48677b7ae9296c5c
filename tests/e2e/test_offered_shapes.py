"""The TPU shapes this cluster offers, on the one-node cluster: its node (a real kubelet,
tests/support/node.py) is labelled as one host of a tpu-v6e-slice 2x4 node pool "v6e-2x4".
`tpu-webhook serve` reads the TPU Nodes (metadata only, with exactly the chart's read-only RBAC:
a token of the chart's ServiceAccount) and warns about a JobSet whose shape no Node has; with
the administrator's declared list enforced (the chart's `offeredShapes.declared` and
`enforce`), it refuses it. A Kueue ResourceFlavor (Kueue's own CRD, v1beta2) that names a
4x4 shape offers it. The JobSet CRD is the pinned JobSet module's.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dev.chart import url_mode_configurations
from dev.controlplane import ControlPlane
from dev.operator_crds import crd_dirs, install_crds
from dev.tools import tools_dir
from tests.support.chart_identity import chart_rbac, token_kubeconfig
from tests.support.node import ClusterNode
from tests.support.webhook_process import WebhookProcess, make_certs

pytestmark = [pytest.mark.e2e, pytest.mark.debian, pytest.mark.timeout(300)]

RUN = uuid.uuid4().hex[:6]
RELEASE = f"offered-{RUN}"
NAMESPACE = f"tpu-webhook-offered-{RUN}"
WORK = f"offered-{RUN}"
POOL = "v6e-2x4"
FLAVOR_CRD = Path(__file__).parent / "data" / "crds" / "kueue.x-k8s.io_resourceflavors.yaml"
V6E_2X4_HOST = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
    "cloud.google.com/gke-tpu-topology": "2x4",
    "cloud.google.com/gke-accelerator-count": "4",
    "cloud.google.com/gke-nodepool": POOL,
}


@pytest.fixture(scope="module")
def control_plane(debian_packages: None) -> Iterator[ControlPlane]:
    """The one-node cluster's control plane (this module's own: its node is a v6e 2x4 host)."""
    cluster = ClusterNode(tools_dir(), labels=V6E_2X4_HOST, tpu_chips=4)
    cluster.start()
    try:
        yield cluster.cp
    finally:
        cluster.stop()


def jobset(name: str, topology: str, hosts: int) -> str:
    return f"""\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: {name}
spec:
  replicatedJobs:
    - name: slice
      replicas: 1
      template:
        spec:
          parallelism: {hosts}
          completions: {hosts}
          backoffLimit: 0
          template:
            spec:
              nodeSelector:
                cloud.google.com/gke-tpu-accelerator: tpu-v6e-slice
                cloud.google.com/gke-tpu-topology: {topology}
              containers:
                - name: jax
                  image: jax
                  resources:
                    limits:
                      google.com/tpu: 4
"""


@pytest.fixture(scope="module")
def kubeconfig(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The chart's RBAC applied, the TPU Node registered, the JobSet CRD installed: a token
    kubeconfig of the chart's ServiceAccount."""
    cp = control_plane
    install_crds(cp, [crd_dirs(["jobset"])["jobset"]], time.monotonic() + 120)
    for name in (NAMESPACE, WORK):
        cp.kubectl("create", "namespace", name, check=True)
    rbac = chart_rbac(RELEASE, NAMESPACE)
    cp.kubectl("apply", "-f", "-", input="\n".join(json.dumps(o) for o in rbac), check=True)
    (account,) = [o["metadata"]["name"] for o in rbac if o["kind"] == "ServiceAccount"]
    yield token_kubeconfig(
        cp, account, NAMESPACE, tmp_path_factory.mktemp("offered") / "kubeconfig"
    )
    cp.kubectl("delete", "-f", "-", input="\n".join(json.dumps(o) for o in rbac))
    for name in (NAMESPACE, WORK):
        cp.kubectl("delete", "namespace", name, "--wait=false")


@contextmanager
def serving(cp: ControlPlane, kubeconfig: Path, work: Path, **env: str) -> Iterator[WebhookProcess]:
    """`tpu-webhook serve` reading the cluster with `env`, registered as release `work.name`."""
    make_certs(work)
    environment = {
        "TPU_WEBHOOK_CLUSTER_OBJECTS": "true",
        "TPU_WEBHOOK_CLUSTER_SYNC_SECONDS": "1",
        "TPU_WEBHOOK_KUBECONFIG": str(kubeconfig),
        **env,
    }
    with WebhookProcess(work, env=environment) as process:
        release = f"{work.name[:20]}-{RUN}".lower().replace("_", "-")
        configurations = url_mode_configurations(
            process.url, process.ca_file.read_bytes(), release=release
        )
        manifest = "\n".join(json.dumps(c) for c in configurations)
        cp.kubectl("apply", "-f", "-", input=manifest, check=True)
        try:
            yield process
        finally:
            cp.kubectl("delete", "-f", "-", input=manifest)


def create(cp: ControlPlane, manifest: str) -> Any:
    return cp.kubectl("create", "--dry-run=server", "-n", WORK, "-f", "-", input=manifest)


def until(cp: ControlPlane, manifest: str, text: str) -> Any:
    """`kubectl create` again until its output says `text` (the server syncs, the
    configurations go live): the last answer."""
    deadline = time.monotonic() + 60
    while text not in ((proc := create(cp, manifest)).stderr + proc.stdout):
        assert time.monotonic() < deadline, proc.stderr
        time.sleep(0.5)
    return proc


def test_a_4x4_jobset_is_warned_that_only_the_2x4_pool_is_offered(
    control_plane: ControlPlane, kubeconfig: Path, tmp_path: Path
) -> None:
    with serving(control_plane, kubeconfig, tmp_path / "warn"):
        proc = until(control_plane, jobset("train", "4x4", 4), "shows no tpu-v6e-slice 4x4")
        assert proc.returncode == 0, proc.stderr
        assert (
            "Warning: spec.replicatedJobs[0].template.spec.template.spec."
            'nodeSelector[cloud.google.com/gke-tpu-topology]: Invalid value: "4x4": this cluster '
            "shows no tpu-v6e-slice 4x4 nodes; it offers tpu-v6e-slice 2x4 (node pool "
            f'"{POOL}" (1 node)); the nearest fit offered is tpu-v6e-slice 2x4.'
        ) in proc.stderr
        fits = create(control_plane, jobset("fits", "2x4", 2))
        assert fits.returncode == 0, fits.stderr
        assert "shows no" not in fits.stderr


def test_with_the_declared_list_enforced_the_same_jobset_is_denied(
    control_plane: ControlPlane, kubeconfig: Path, tmp_path: Path
) -> None:
    declared = [{"accelerator": "tpu-v6e-slice", "topologies": ["2x4", "8x8"]}]
    with serving(
        control_plane,
        kubeconfig,
        tmp_path / "enforce",
        TPU_WEBHOOK_OFFERED_SHAPES=json.dumps(declared),
        TPU_WEBHOOK_ENFORCE_OFFERED_SHAPES="true",
    ):
        proc = until(control_plane, jobset("train", "4x4", 4), "denied the request")
        assert proc.returncode != 0
        assert (
            'admission webhook "validate.tpu-webhook.io" denied the request: '
            "spec.replicatedJobs[0].template.spec.template.spec.nodeSelector"
            '[cloud.google.com/gke-tpu-topology]: Unsupported value: "4x4": tpu-v6e-slice 4x4 is '
            "not among the TPU shapes the cluster administrator declared for namespace "
            f"{WORK}: tpu-v6e-slice 2x4, 8x8; the nearest fit offered is tpu-v6e-slice 2x4; "
            "select one of them (or ask for the shape to be added)"
        ) in proc.stderr
        declared_shape = create(control_plane, jobset("declared", "8x8", 16))
        assert declared_shape.returncode == 0, declared_shape.stderr
        assert "declared" not in declared_shape.stderr


def test_a_shape_a_kueue_resource_flavor_names_is_offered(
    control_plane: ControlPlane, kubeconfig: Path, tmp_path: Path
) -> None:
    """Kueue admits workloads onto its flavors' node labels: a flavor of v6e 4x4 offers it (a
    node pool that scales from zero behind it leaves no Node)."""
    cp = control_plane
    cp.kubectl("apply", "-f", str(FLAVOR_CRD), check=True)
    cp.kubectl("wait", "--for=condition=Established", "crd/resourceflavors.kueue.x-k8s.io",
               "--timeout=60s", check=True)  # fmt: skip
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": f"v6e-4x4-{RUN}"},
        "spec": {
            "nodeLabels": {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                "cloud.google.com/gke-tpu-topology": "4x4",
            }
        },
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(flavor), check=True)
    try:
        with serving(cp, kubeconfig, tmp_path / "flavor"):
            # live once a shape nothing offers is warned about, naming the flavor's
            proc = until(cp, jobset("big", "8x8", 16), f'ResourceFlavor "v6e-4x4-{RUN}"')
            assert "tpu-v6e-slice 4x4 (ResourceFlavor" in proc.stderr
            offered = create(cp, jobset("train", "4x4", 4))
            assert offered.returncode == 0, offered.stderr
            assert "shows no" not in offered.stderr
    finally:
        cp.kubectl("delete", "resourceflavor", flavor["metadata"]["name"])
