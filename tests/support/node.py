"""A one-node Kubernetes cluster for end-to-end tests: a real kubelet that runs Pods.

Its own control plane (``ControlPlane`` with node flags), Debian's containerd + runc + CNI
plugins, and kubelet + kube-scheduler built from the same Kubernetes module as the API server
(tests/tools). The settings are the ones recorded as working on these machines (2-core VM,
cgroup v1, root, no CAP_SYS_RESOURCE in the bounding set):

- containerd CRI ``restrict_oom_score_adj = true``: without it every sandbox fails with
  ``runc create failed: ... can't get final child's PID from pipe: EOF`` (nobody may set a
  negative oom_score_adj); runc with cgroupfs (``SystemdCgroup = false``).
- kubelet: ``failCgroupV1: false``, ``cgroupDriver: cgroupfs``, ``failSwapOn: false``,
  ``--node-ip`` = eth0's IPv4 (loopback is refused); client-certificate authentication only.
- kube-apiserver: ``--authorization-mode=Node,RBAC``, NodeRestriction, a kubelet client
  certificate, ``--enable-aggregator-routing=true`` (there is no kube-proxy: ClusterIPs do not
  route, so the API server calls Service endpoints, webhooks included, directly), and the
  ResourceQuota admission configuration GKE uses, which admits Pods of the system-* priority
  classes only in namespaces with a quota for them.
- Images never come from a registry: a pause image and a ``printenv`` image are one-layer
  archives of tiny static Go programs (tests/support/nodeimages), imported with ``ctr -n k8s.io
  images import`` like any archive given (the webhook image); Pods use imagePullPolicy Never.
- The node is a TPU node: labelled ``tpu-v4-podslice`` / ``2x2x4`` and advertising
  ``google.com/tpu`` in status.capacity and status.allocatable (capacity alone fails the first
  scheduling attempt). ``labels`` and ``tpu_chips`` make it another one, e.g. a node of a pool
  GKE gives to the TPU DRA driver (``DRA_NODE_LABELS``, no ``google.com/tpu``).
- Dynamic Resource Allocation: ``resource.k8s.io/v1`` is served and the scheduler's
  DynamicResources plugin is on by default in 1.35; the controller manager runs the
  resourceclaim controller (a Pod's ResourceClaims from its claim templates). The kubelet
  deletes every ResourceSlice of its node once at start-up (no driver has registered yet), in
  the background: the start waits until a canary slice written before it is gone, so the
  slices a test publishes afterwards stay. ``start_dra_plugin`` runs a stand-in for a DRA
  driver's kubelet plugin (tests/support/draplugin) that prepares claims with no device.

The configuration files are in tests/support/node_config.py, the tiny images in
node_images.py, the cleanup in node_cleanup.py.

One kubelet per machine (fixed port 10250, the ``kubepods`` cgroups, /run/containerd/s, netns
names): ``ClusterNode`` holds an exclusive lock file for its lifetime and records what it started
in a state file, so a session killed mid-run is cleaned up by the next one. ``stop()`` always tears
down in order: delete the Pods, stop kube-scheduler and the kubelet, kill what is left of the
containers, stop containerd and its shims (found by this node's socket path), unmount and remove
the paths, the bridge, the cgroups, then the control plane.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from dev.components import DEFAULT_CONTROLLERS
from dev.controlplane import ControlPlane, ControlPlaneError
from dev.pki import ClusterCA, cert_pem, kubeconfig
from dev.processes import Started, check_alive, child_setup, free_port, stop_process, wait_until
from tests.support.node_cleanup import clean_up, machine_state
from tests.support.node_config import (
    ADMISSION_CONFIG,
    CTR_NAMESPACE,
    DRA_NODE_LABELS,
    NODE_NAME,
    PAUSE_IMAGE,
    PRINTENV_IMAGE,
    TPU_CHIPS,
    TPU_LABELS,
    TPU_RESOURCE,
    cni_config,
    containerd_config,
    eth0_ipv4,
    kubelet_config,
    missing_debian_tools,
)
from tests.support.node_images import build_node_programs, write_image_archive

__all__ = [
    "DRA_NODE_LABELS",
    "NODE_NAME",
    "PRINTENV_IMAGE",
    "TPU_LABELS",
    "ClusterNode",
    "NodeError",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCK_FILE = Path(tempfile.gettempdir()) / "tpu-webhook-e2e-node.lock"
STATE_FILE = Path(tempfile.gettempdir()) / "tpu-webhook-e2e-node.json"
LOCK_TIMEOUT_S = 30 * 60
WORKDIR_PREFIX = "tpu-webhook-node-"
DRA_PLUGIN_SRC = Path(__file__).resolve().parent / "draplugin"
#: Written before the kubelet starts; gone once the kubelet's start-up wipe of the node's
#: ResourceSlices has run (kubelet pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go).
WIPE_CANARY = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": f"{NODE_NAME}-wipe-canary"},
    "spec": {
        "driver": "wipe-canary.tpu-webhook.io",
        "nodeName": NODE_NAME,
        "pool": {"name": NODE_NAME, "generation": 1, "resourceSliceCount": 1},
        "devices": [],
    },
}

NODE_CONTROLLERS: tuple[str, ...] = (
    *DEFAULT_CONTROLLERS,
    "endpoints-controller",
    "endpointslice-controller",
    "disruption-controller",
    "resourcequota-controller",
    "pod-garbage-collector-controller",
    "node-lifecycle-controller",  # lifts the not-ready taint the kubelet registers with
    "resourceclaim-controller",  # DRA: a Pod's ResourceClaims from its templates, deleted after
)


class NodeError(ControlPlaneError):
    """The node could not be prepared, started or cleaned."""


class ClusterNode(Started):
    """A control plane plus one kubelet node that runs Pods; see the module docstring.

    ``images`` are image archives (docker-archive or OCI) imported into containerd before the
    kubelet starts; ``labels`` are the node's, and ``tpu_chips`` the ``google.com/tpu`` it
    advertises (0: none). Use it as a context manager; ``stop()`` is safe to call more than once.
    """

    def __init__(
        self,
        bin_dir: Path,
        images: Sequence[Path] = (),
        *,
        labels: Mapping[str, str] = TPU_LABELS,
        tpu_chips: int = TPU_CHIPS,
        start_timeout: float = 180.0,
        lock_timeout: float = LOCK_TIMEOUT_S,
    ) -> None:
        self.bin_dir = bin_dir
        self.images = tuple(images)
        self.labels = dict(labels)
        self.tpu_chips = tpu_chips
        self.start_timeout = start_timeout
        self.lock_timeout = lock_timeout
        self.control_plane: ControlPlane | None = None
        self.node_ip = ""
        self.start_seconds = 0.0
        self.figures: dict[str, float] = {}
        self._workdir: Path | None = None
        self._lock: IO[str] | None = None
        self._state: dict[str, Any] = {}
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._logs: list[IO[bytes]] = []

    # ------------------------------------------------------------------ properties

    @property
    def cp(self) -> ControlPlane:
        if self.control_plane is None:
            raise NodeError("node is not started")
        return self.control_plane

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise NodeError("node is not started")
        return self._workdir

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    def kubectl(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.cp.kubectl(*args, **kwargs)

    def helm(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.cp.helm(*args, **kwargs)

    def ctr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", str(self.containerd_socket), "-n", CTR_NAMESPACE, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        missing = missing_debian_tools()
        if missing:
            raise NodeError(
                f"missing Debian packages: {' '.join(missing)} (make setup installs them)"
            )
        self._acquire_lock()
        began = time.monotonic()
        try:
            self._recover_stale()
            self._workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
            self.log_dir.mkdir()
            self._state = {
                "owner": os.getpid(),
                "workdir": str(self._workdir),
                "containerd_socket": str(self.containerd_socket),
                "pids": [],
                **machine_state(),
            }
            self._save_state()
            self._start(deadline=began + self.start_timeout)
        except BaseException:
            self.stop(keep_logs_in=REPO_ROOT / ".e2e-logs" / f"node-start-{int(time.time())}")
            raise
        self.start_seconds = time.monotonic() - began

    def stop(self, keep_logs_in: Path | None = None) -> Path | None:
        """Tear down in order (Pods, kubelet, containers, containerd, paths, control plane).

        With ``keep_logs_in``, the node's and the control plane's logs are copied there first.
        """
        if self._lock is None:
            return None
        kept: Path | None = None
        try:
            if self.control_plane is not None and self.control_plane.running:
                with contextlib.suppress(Exception):
                    self.delete_all_pods()
            for name in ("kube-scheduler", "kubelet", "dra-plugin"):
                self._stop(name)
            if self._workdir is not None and self.containerd_socket.exists():
                with contextlib.suppress(Exception):
                    self._kill_leftover_containers()
            self._stop("containerd")
            if keep_logs_in is not None and self._workdir is not None:
                keep_logs_in.mkdir(parents=True, exist_ok=True)
                shutil.copytree(self.log_dir, keep_logs_in / "node", dirs_exist_ok=True)
                kept = keep_logs_in
            if self._state:
                clean_up(self._state)
        finally:
            for f in self._logs:
                with contextlib.suppress(OSError):
                    f.close()
            self._logs.clear()
            if self.control_plane is not None:
                self.control_plane.stop(keep_logs_in=kept / "control-plane" if kept else None)
                self.control_plane = None
            self._workdir = None
            self._state = {}
            STATE_FILE.unlink(missing_ok=True)
            self._release_lock()
        return kept

    # ------------------------------------------------------------------ Pods

    def delete_all_pods(self, timeout: float = 120) -> None:
        """Delete every workload and Pod and wait until the kubelet has stopped them."""
        self.kubectl(
            "delete",
            "deployments,replicasets,statefulsets,daemonsets,jobs,cronjobs",
            "--all",
            "--all-namespaces",
            "--wait=false",
            timeout=timeout,
        )
        self.kubectl(
            "delete", "pods", "--all", "--all-namespaces", f"--timeout={int(timeout)}s",
            timeout=timeout + 10,
        )  # fmt: skip

    def start_dra_plugin(self, driver: str, timeout: float = 300) -> Path:
        """Run the stand-in kubelet plugin for `driver` until the node stops; return its log.

        Built with the local Go toolchain (tests/support/draplugin; its first build fetches and
        compiles the client libraries, later ones take seconds). Returns once the kubelet has
        registered it.
        """
        binary = self.workdir / "bin" / "draplugin"
        env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-mod=readonly")
        build = subprocess.run(
            ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(binary), "."],
            cwd=DRA_PLUGIN_SRC, env=env, capture_output=True, text=True, timeout=timeout,
            check=False,
        )  # fmt: skip
        if build.returncode != 0:
            raise NodeError(f"go build {DRA_PLUGIN_SRC}: {build.stderr}")
        root = self.workdir / "kubelet"
        self._spawn(
            "dra-plugin",
            [
                str(binary),
                f"--kubeconfig={self.workdir / 'kubelet.kubeconfig'}",
                f"--node-name={NODE_NAME}",
                f"--driver={driver}",
                f"--registrar-dir={root / 'plugins_registry'}",
                f"--plugin-dir={root / 'plugins' / driver}",
            ],
        )
        log = self.log_dir / "dra-plugin.log"
        self.wait_for(
            f"the kubelet to register the {driver} plugin",
            lambda: "\nregistered\n" in log.read_text(errors="replace"),
            timeout=60,
        )
        return log

    def wait_for(self, what: str, probe: Callable[[], Any], timeout: float = 60) -> Any:
        expected = (subprocess.SubprocessError, ValueError, KeyError)
        deadline = time.monotonic() + timeout
        return wait_until(what, deadline, probe, self._check_alive, NodeError, expected)

    def get_json(self, *args: str) -> Any:
        proc = self.kubectl("get", *args, "-o", "json")
        if proc.returncode != 0:
            raise ValueError(proc.stderr)
        return json.loads(proc.stdout)

    # ------------------------------------------------------------------ internals

    def _acquire_lock(self) -> None:
        lock = LOCK_FILE.open("a+")
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    lock.close()
                    raise NodeError(
                        f"another test session holds {LOCK_FILE} (one kubelet per machine)"
                    ) from None
                time.sleep(1)
        self._lock = lock

    def _release_lock(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def _recover_stale(self) -> None:
        """A previous node died without stop() (we hold the lock, so it is not running)."""
        try:
            state = json.loads(STATE_FILE.read_text())
        except (OSError, ValueError):
            return
        clean_up(state)
        STATE_FILE.unlink(missing_ok=True)

    def _save_state(self) -> None:
        STATE_FILE.write_text(json.dumps(self._state))

    def _spawn(self, name: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"{name}.log").open("ab")
        self._logs.append(log)
        log.write(("$ " + " ".join(args) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            preexec_fn=child_setup,  # own process group, SIGKILL when the test process dies
        )
        self._procs.append((name, proc))
        self._state["pids"].append(proc.pid)
        self._save_state()
        return proc

    def _stop(self, name: str) -> None:
        for n, proc in [p for p in self._procs if p[0] == name]:
            stop_process(proc, timeout=20)
            self._procs.remove((n, proc))

    def _check_alive(self) -> None:
        procs = ((n, p, self.log_dir / f"{n}.log") for n, p in self._procs)
        check_alive(procs, NodeError, lines=40)

    def _kill_leftover_containers(self) -> None:
        tasks = self.ctr("tasks", "ls", "-q").stdout.split()
        for task in tasks:
            self.ctr("tasks", "kill", "--signal", "SIGKILL", task)
        for task in tasks:
            self.ctr("tasks", "delete", "--force", task)

    def _start(self, deadline: float) -> None:
        wd = self.workdir
        self.node_ip = eth0_ipv4()
        for sub in ("pki", "containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "images"):
            (wd / sub).mkdir(parents=True)
        self._timed("control plane", self._start_control_plane)
        self._timed("containerd + image import", lambda: self._start_containerd(deadline))
        self._timed("kubelet -> node Ready", lambda: self._start_kubelet(deadline))
        if self.tpu_chips:
            self._advertise_tpus()
        self._spawn(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                f"--kubeconfig={self.cp.kubeconfig}",
                f"--authentication-kubeconfig={self.cp.kubeconfig}",
                f"--authorization-kubeconfig={self.cp.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
            ],
        )

    def _timed(self, step: str, run: Callable[[], None]) -> None:
        began = time.monotonic()
        run()
        self.figures[step] = time.monotonic() - began

    def _start_control_plane(self) -> None:
        """With the node flags; the API server's client certificate towards the kubelet comes
        from a CA only the kubelet trusts."""
        pki = self.workdir / "pki"
        node_ca = ClusterCA()
        client_crt, client_key = node_ca.issue(
            "kube-apiserver-kubelet-client", organizations=("system:masters",), client=True
        )
        (pki / "node-ca.crt").write_bytes(cert_pem(node_ca.cert))
        (pki / "kubelet-client.crt").write_bytes(client_crt)
        (pki / "kubelet-client.key").write_bytes(client_key)
        (pki / "admission.json").write_text(json.dumps(ADMISSION_CONFIG))
        self.control_plane = ControlPlane(
            self.bin_dir,
            controllers=NODE_CONTROLLERS,
            extra_apiserver_args=(
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--admission-control-config-file={pki / 'admission.json'}",
                f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'kubelet-client.key'}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--enable-aggregator-routing=true",
            ),
        )
        self.control_plane.start()

    def _start_containerd(self, deadline: float) -> None:
        wd = self.workdir
        net_d = wd / "cni" / "net.d"
        (net_d / "10-tpu-webhook-e2e.conflist").write_text(
            json.dumps(cni_config(wd / "cni" / "ipam"))
        )
        conf = wd / "containerd" / "config.toml"
        conf.write_text(containerd_config(wd / "containerd", self.containerd_socket, net_d))
        self._spawn("containerd", ["containerd", "--config", str(conf), "--log-level", "info"])
        self.wait_for(
            "containerd",
            lambda: self.ctr("version", timeout=10).returncode == 0,
            timeout=max(5.0, deadline - time.monotonic()),
        )
        images = wd / "images"
        programs = build_node_programs(images)
        for archive in (
            write_image_archive(programs["pause"], PAUSE_IMAGE, images / "pause.tar"),
            write_image_archive(programs["printenv"], PRINTENV_IMAGE, images / "printenv.tar"),
            *self.images,
        ):
            proc = self.ctr("images", "import", str(archive), timeout=300)
            if proc.returncode != 0:
                raise NodeError(f"ctr images import {archive}: {proc.stderr}")

    def _start_kubelet(self, deadline: float) -> None:
        wd = self.workdir
        cert, key = self.cp.issue_cert(
            f"system:node:{NODE_NAME}", organizations=("system:nodes",), ip_addresses=()
        )
        config = kubeconfig(self.cp.server, self.cp.ca_pem, cert, key, user="node")
        (wd / "kubelet.kubeconfig").write_text(json.dumps(config))
        settings = kubelet_config(wd, self.node_ip, self.containerd_socket)
        (wd / "kubelet.json").write_text(json.dumps(settings))
        canary = json.dumps(WIPE_CANARY)
        self.kubectl("create", "-f", "-", input=canary, check=True)
        labels = ",".join(f"{k}={v}" for k, v in self.labels.items())
        self._spawn(
            "kubelet",
            [
                str(self.bin_dir / "kubelet"),
                f"--config={wd / 'kubelet.json'}",
                f"--kubeconfig={wd / 'kubelet.kubeconfig'}",
                f"--root-dir={wd / 'kubelet'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={self.node_ip}",
                f"--node-labels={labels}",
                "--v=2",
            ],
        )
        self.wait_for("node Ready", self._node_ready, timeout=max(5.0, deadline - time.monotonic()))
        self.wait_for(
            "the kubelet's start-up wipe of the node's ResourceSlices",
            lambda: "NotFound" in self.kubectl("get", "-f", "-", input=canary).stderr,
            timeout=max(5.0, deadline - time.monotonic()),
        )

    def _node_ready(self) -> bool:
        node = self.get_json("node", NODE_NAME)
        conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
        return conditions.get("Ready") == "True"

    def _advertise_tpus(self) -> None:
        key = TPU_RESOURCE.replace("/", "~1")
        patch = [
            {"op": "add", "path": f"/status/capacity/{key}", "value": str(self.tpu_chips)},
            {"op": "add", "path": f"/status/allocatable/{key}", "value": str(self.tpu_chips)},
        ]
        self.kubectl(
            "patch", "node", NODE_NAME, "--subresource=status", "--type=json",
            "-p", json.dumps(patch), check=True,
        )  # fmt: skip

        def advertised() -> bool:
            status = self.get_json("node", NODE_NAME)["status"]
            return bool(
                status["capacity"].get(TPU_RESOURCE) == str(self.tpu_chips)
                and status["allocatable"].get(TPU_RESOURCE) == str(self.tpu_chips)
            )

        self.wait_for("google.com/tpu on the node", advertised, timeout=30)
