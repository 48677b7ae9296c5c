"""The real JobSet, LeaderWorkerSet, KubeRay and Kubeflow Trainer operators, run on a
:class:`ControlPlane`.

Each operator's controller manager is built from its released Go module by
``tests/tools/operators/build.sh`` (cached outside the repository, with the CRDs and
webhook manifests of the same module version). :func:`crd_dirs` finds the CRDs alone
without a build (`make run`'s default): a build's ``crds/`` when one of that version is
cached, else the module zip from the Go module proxy. :class:`Operators` installs the CRDs
(server-side apply, then waits until Established), starts each manager as a process on
loopback with the control plane's admin kubeconfig, leader election off, metrics and
health probes on free loopback ports, and always stops them.

JobSet's, LeaderWorkerSet's and Trainer's own admission webhooks run in url mode: their
internal cert management (a cert-controller writing a Secret for a Service) is off in their
configuration file, their webhook server listens on 127.0.0.1 with a certificate from
the control plane's CA, and Mutating/Validating configurations copied from each
module's webhook ``manifests.yaml`` (with its kustomize patches) point at
``https://127.0.0.1:<port><path>``. KubeRay's optional (validation-only) webhook stays
off: it binds the fixed port 9443 on every interface, which parallel sessions on a
shared machine would fight over. Trainer drives JobSets: it needs JobSet's CRD and
controller running (the e2e suite starts it on its own, after the others). Usage::

    with ControlPlane() as cp, Operators(cp) as ops:
        cp.kubectl("apply", "-f", "jobset.yaml", check=True)

    with ControlPlane() as cp:  # the kinds only: objects are stored, nothing acts on them
        install_crds(cp, crd_dirs().values(), time.monotonic() + 120)
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import jsonpatch
from ruamel.yaml import YAML

from dev.controlplane import ControlPlane
from dev.processes import (
    Started,
    check_alive,
    child_setup,
    free_port,
    http_ok,
    stop_process,
    wait_until,
)
from dev.tools import REPO_ROOT

OPERATORS_DIR = REPO_ROOT / "tests" / "tools" / "operators"
BUILD_SCRIPT = OPERATORS_DIR / "build.sh"
NAMES: tuple[str, ...] = ("jobset", "lws", "kuberay", "trainer")
TITLES = {
    "jobset": "JobSet",
    "lws": "LeaderWorkerSet",
    "kuberay": "KubeRay",
    "trainer": "Kubeflow Trainer",
}
#: Where each module keeps its CRDs (build.sh's crd_dir; a test compares the two sources).
CRD_PATHS = {
    "jobset": "config/components/crd/bases",
    "lws": "config/crd/bases",
    "kuberay": "config/crd/bases",
    "trainer": "manifests/base/crds",
}
#: Operators whose own webhooks run (see the module docstring for KubeRay's).
WEBHOOK_OPERATORS: tuple[str, ...] = ("jobset", "lws", "trainer")
#: The kustomization that sits beside the CRDs in Trainer's folder: not a manifest to apply.
KUSTOMIZATION = "kustomization.yaml"
BUILD_TIMEOUT_S = 60 * 60  # cold: a few minutes per operator on 2 cores; slow proxies
FIELD_MANAGER = "tpu-webhook-e2e"


class OperatorError(RuntimeError):
    """An operator could not be built, installed or started."""


# ------------------------------------------------------------------------------ builds


@dataclass(frozen=True)
class OperatorBuild:
    """One folder made by build.sh: ``manager``, ``crds/``, ``webhook/``, ``build-info``."""

    name: str
    dir: Path

    @property
    def manager(self) -> Path:
        return self.dir / "manager"

    @property
    def crds(self) -> Path:
        return self.dir / "crds"

    @property
    def webhook_dir(self) -> Path:
        return self.dir / "webhook"

    @functools.cached_property
    def info(self) -> dict[str, str]:
        """``module``, ``version``, ``main`` and ``tag_time`` of the build."""
        lines = (self.dir / "build-info").read_text().splitlines()
        return dict(line.split(" ", 1) for line in lines if " " in line)

    @property
    def version(self) -> str:
        return self.info["version"]


@functools.cache
def operator_builds(names: tuple[str, ...] = NAMES) -> dict[str, OperatorBuild]:
    """Build (or find cached) the operators with build.sh, once per process."""
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT), *names],
            stdout=subprocess.PIPE,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=True,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise OperatorError(f"{BUILD_SCRIPT} failed: {exc}") from exc
    return builds_from(names, proc.stdout)


def builds_from(names: Sequence[str], stdout: str) -> dict[str, OperatorBuild]:
    """The builds build.sh named on its stdout (one folder per name, in order)."""
    dirs = stdout.strip().splitlines()
    if len(dirs) != len(names):
        raise OperatorError(f"{BUILD_SCRIPT} printed {dirs!r} for {names!r}")
    builds = {name: OperatorBuild(name, Path(d)) for name, d in zip(names, dirs, strict=True)}
    for build in builds.values():
        if not build.manager.is_file() or not any(build.crds.glob("*.yaml")):
            raise OperatorError(f"{build.dir} lacks manager or CRDs")
    return builds


# -------------------------------------------------------------------------------- CRDs


def pinned_module(name: str) -> tuple[str, str]:
    """(module, version) of an operator, as its go.mod pins it (build.sh reads the same line:
    the one single-line `require`)."""
    for line in (OPERATORS_DIR / name / "go.mod").read_text().splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "require" and words[1] != "(":
            return words[1], words[2]
    raise OperatorError(f"{OPERATORS_DIR / name / 'go.mod'} pins no operator module")


def cache_root() -> Path:
    """build.sh's ``$cache_root``."""
    tools = os.environ.get("TPU_WEBHOOK_TOOLS_CACHE") or str(
        Path.home() / ".cache" / "tpu-webhook" / "tools"
    )
    return Path(tools) / "operators"


def cached_crds(name: str) -> Path | None:
    """``crds/`` of a finished build of the pinned version (any build key: the CRDs are the
    module zip's), or None."""
    _, version = pinned_module(name)
    done = [
        d / "crds"
        for d in sorted(cache_root().glob(f"{name}-{version}-*"))
        if (d / "build-info").is_file() and any((d / "crds").glob("*.yaml"))
    ]
    return done[-1] if done else None


def module_crds(name: str) -> Path:
    """The CRD folder inside the pinned module, downloaded (module zip only, no dependencies,
    no build) by `go mod download -json` into the Go module cache if not already there."""
    module, version = pinned_module(name)
    if shutil.which("go") is None:
        raise OperatorError(f"Go is not installed to download {module}@{version}")
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    try:
        proc = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            cwd=OPERATORS_DIR / name,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OperatorError(f"go mod download {module}@{version}: {exc}") from exc
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        info = {}
    if proc.returncode != 0 or info.get("Error") or not info.get("Dir"):
        problem = info.get("Error") or proc.stderr.strip() or f"exit {proc.returncode}"
        raise OperatorError(f"go mod download {module}@{version}: {problem}")
    crds = Path(info["Dir"]) / CRD_PATHS[name]
    if not crd_files([crds]):
        raise OperatorError(f"{module}@{version} has no CRDs in {CRD_PATHS[name]}")
    return crds


def crd_dirs(
    names: Sequence[str] = NAMES, on_download: Callable[[str, str], None] | None = None
) -> dict[str, Path]:
    """Each operator's CRD folder: its cached build's, else its module's (downloaded when
    missing; ``on_download(module, version)`` is called first, to show progress)."""
    found: dict[str, Path] = {}
    for name in names:
        cached = cached_crds(name)
        if cached is None and on_download is not None:
            on_download(*pinned_module(name))
        found[name] = cached or module_crds(name)
    return found


def crd_files(dirs: Iterable[Path]) -> list[Path]:
    """The CRD manifests of each folder (``*.yaml`` but a kustomization, as build.sh copies
    them)."""
    return [f for d in dirs for f in sorted(d.glob("*.yaml")) if f.name != KUSTOMIZATION]


def install_crds(control_plane: ControlPlane, dirs: Iterable[Path], deadline: float) -> None:
    """Server-side apply the CRDs (too large for client-side apply's last-applied
    annotation), then wait until they are Established."""
    files = [arg for f in crd_files(dirs) for arg in ("-f", str(f))]
    ssa = ["apply", "--server-side", f"--field-manager={FIELD_MANAGER}"]
    control_plane.kubectl(*ssa, *files, check=True, timeout=120)
    while True:
        remaining = max(1, int(deadline - time.monotonic()))
        wait = ["wait", "--for=condition=Established", f"--timeout={remaining}s", *files]
        result = control_plane.kubectl(*wait, timeout=remaining + 30)
        # A CRD the API server has not given conditions yet fails `kubectl wait` at once
        # (".status.conditions accessor error"): ask again.
        if result.returncode == 0 or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if result.returncode != 0:
        raise OperatorError(f"CRDs not Established: {result.stderr.strip()}")


# ---------------------------------------------------------------------------- webhooks


def _yaml_docs(path: Path) -> list[Any]:
    return [d for d in YAML(typ="safe").load_all(path.read_text()) if d is not None]


def upstream_webhook_configurations(build: OperatorBuild) -> list[dict[str, Any]]:
    """The operator's webhook configurations as its kustomization renders them.

    ``manifests.yaml`` (generated by controller-gen) plus the JSON 6902 patches of its
    ``kustomization.yaml`` (JobSet's and LWS's add an ``objectSelector`` so that their Pod
    webhooks see only their own Pods; Trainer's name its configurations, targeting them by kind
    alone). A strategic-merge patch is not expected: it fails.
    """
    webhook_dir = build.webhook_dir
    docs: list[dict[str, Any]] = _yaml_docs(webhook_dir / "manifests.yaml")
    kustomization = webhook_dir / "kustomization.yaml"
    patches = _yaml_docs(kustomization)[0].get("patches", []) if kustomization.exists() else []
    for entry in patches:
        target = entry["target"]
        ops = _yaml_docs(webhook_dir / entry["path"])[0]
        if not isinstance(ops, list):
            raise OperatorError(f"{build.name}: {entry['path']} is not a JSON 6902 patch")
        matched = [
            i
            for i, d in enumerate(docs)
            if d["kind"] == target["kind"]
            and target.get("name", d["metadata"]["name"]) == d["metadata"]["name"]
        ]
        if len(matched) != 1:
            raise OperatorError(f"{build.name}: patch target {target} matched {len(matched)}")
        docs[matched[0]] = jsonpatch.apply_patch(docs[matched[0]], ops)
    return docs


def url_mode(
    docs: Sequence[Mapping[str, Any]], prefix: str, base_url: str, ca_bundle: str
) -> list[dict[str, Any]]:
    """Configurations pointing at ``base_url`` instead of the in-cluster Service.

    Names get the operator's kustomize ``namePrefix`` (``jobset-``, ``lws-``; ``trainer-``
    before the names its patches give); rules, selectors and failure policies are kept as
    upstream ships them.
    """
    out: list[dict[str, Any]] = []
    for doc in docs:
        config = copy.deepcopy(dict(doc))
        config["metadata"] = {"name": prefix + doc["metadata"]["name"]}
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
        out.append(config)
    return out


# --------------------------------------------------------------------------- canaries
# Webhook configurations go live asynchronously: each one is probed with a server-side
# dry run until the operator's webhook has answered it.

_JOBSET_CANARY: dict[str, Any] = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "operators-canary"},
    "spec": {
        "replicatedJobs": [
            {
                "name": "r",
                "replicas": 1,
                "template": {
                    "spec": {
                        "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
                    }
                },
            }
        ]
    },
}
_LWS_CANARY: dict[str, Any] = {
    "apiVersion": "leaderworkerset.x-k8s.io/v1",
    "kind": "LeaderWorkerSet",
    "metadata": {"name": "operators-canary"},
    "spec": {
        "replicas": 1,
        "leaderWorkerTemplate": {
            "size": 1,
            "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        },
    },
}


#: Trainer's webhooks: a runtime its ClusterTrainingRuntime webhook refuses (a trainer Job of 2
#: replicas), and a TrainJob on ``_TRAINER_CANARY_RUNTIME`` (which the probe creates for the
#: time it waits) whose runtime patch its TrainJob webhook stamps with a time.
_TRAINER_CANARY_RUNTIME: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "tpu-webhook-operators-canary"},
    "spec": {
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {
                                "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                            },
                            "spec": {
                                "template": {
                                    "spec": {"containers": [{"name": "node", "image": "busybox"}]}
                                }
                            },
                        },
                    }
                ]
            }
        }
    },
}
_TRAINJOB_CANARY: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "operators-canary"},
    "spec": {
        "runtimeRef": {"name": "tpu-webhook-operators-canary"},
        "runtimePatches": [{"manager": "tpu-webhook.io/operators-canary"}],
    },
}


def _jobset_mutating_live(out: dict[str, Any]) -> bool:
    # completionMode is defaulted by the JobSet webhook only (not by the CRD schema).
    job = out["spec"]["replicatedJobs"][0]["template"]["spec"]
    return bool(job.get("completionMode") == "Indexed")


def _lws_mutating_live(out: dict[str, Any]) -> bool:
    # subdomainPolicy is defaulted by the LWS webhook only (not by the CRD schema).
    return bool(out["spec"].get("networkConfig", {}).get("subdomainPolicy") == "Shared")


def _trainer_mutating_live(out: dict[str, Any]) -> bool:
    # a runtime patch's time is stamped by Trainer's TrainJob webhook only
    return bool(out["spec"]["runtimePatches"][0].get("time"))


@dataclass(frozen=True)
class _Canary:
    what: str
    manifest: dict[str, Any]
    live: Callable[[subprocess.CompletedProcess[str]], bool]


def _canaries(name: str) -> list[_Canary]:
    if name == "jobset":
        invalid = copy.deepcopy(_JOBSET_CANARY)
        invalid["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "x", "status": "Ready"}]
        return [
            _Canary(
                "JobSet mutating webhook",
                _JOBSET_CANARY,
                lambda r: r.returncode == 0 and _jobset_mutating_live(json.loads(r.stdout)),
            ),
            _Canary(
                "JobSet validating webhook",
                invalid,
                lambda r: 'admission webhook "vjobset.kb.io" denied' in r.stderr,
            ),
        ]
    if name == "lws":
        invalid = copy.deepcopy(_LWS_CANARY)
        invalid["metadata"]["name"] = "0-operators-canary"  # a DNS-1123 but not 1035 name
        return [
            _Canary(
                "LeaderWorkerSet mutating webhook",
                _LWS_CANARY,
                lambda r: r.returncode == 0 and _lws_mutating_live(json.loads(r.stdout)),
            ),
            _Canary(
                "LeaderWorkerSet validating webhook",
                invalid,
                lambda r: 'admission webhook "vleaderworkerset.kb.io" denied' in r.stderr,
            ),
        ]
    if name == "trainer":
        invalid = copy.deepcopy(_TRAINER_CANARY_RUNTIME)
        invalid["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = 2
        denied = 'admission webhook "validator.clustertrainingruntime.trainer.kubeflow.org" denied'
        return [
            _Canary(
                "Trainer TrainJob webhooks",
                _TRAINJOB_CANARY,
                lambda r: r.returncode == 0 and _trainer_mutating_live(json.loads(r.stdout)),
            ),
            _Canary("Trainer runtime webhook", invalid, lambda r: denied in r.stderr),
        ]
    return []


# --------------------------------------------------------------------------- operators


@dataclass
class _Running:
    name: str
    proc: subprocess.Popen[bytes]
    health_port: int
    metrics_port: int
    webhook_port: int | None
    log: Path


class Operators(Started):
    """The managers of ``builds`` (JobSet, LeaderWorkerSet, KubeRay, Trainer) running against
    ``control_plane``.

    ``start()`` returns when the CRDs are Established, every manager answers its
    ``/readyz`` and (with ``webhooks``) every webhook configuration is live. ``stop()``
    removes the webhook configurations (their failure policy is Fail) and stops the
    processes. Logs go to the control plane's log dir (kept with it on failure).

    ``webhooks=False`` leaves JobSet's, LWS's and Trainer's webhooks unregistered (LWS's
    unserved): then JobSet's and LWS's controllers panic on their first object (see
    tests/tools/README.md).
    """

    def __init__(
        self,
        control_plane: ControlPlane,
        builds: Mapping[str, OperatorBuild] | None = None,
        *,
        webhooks: bool = True,
        kuberay_feature_gates: str = "",
        start_timeout: float = 120.0,
    ) -> None:
        self.cp = control_plane
        self._builds = dict(builds) if builds is not None else None
        self.webhooks = webhooks
        self.kuberay_feature_gates = kuberay_feature_gates
        self.start_timeout = start_timeout
        self.running: dict[str, _Running] = {}
        self.webhook_configurations: list[dict[str, Any]] = []
        self._logs: list[IO[bytes]] = []
        self.start_seconds = 0.0

    @property
    def builds(self) -> dict[str, OperatorBuild]:
        if self._builds is None:
            self._builds = operator_builds()
        return self._builds

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        builds = self.builds  # may build (minutes, cold): not counted in start_timeout
        began = time.monotonic()
        deadline = began + self.start_timeout
        try:
            self.install_crds(builds.values(), deadline)
            starters = {
                "jobset": self._start_jobset,
                "lws": self._start_lws,
                "kuberay": self._start_kuberay,
                "trainer": self._start_trainer,
            }
            for name, build in builds.items():
                starters[name](build)
            for run in self.running.values():
                url = f"http://127.0.0.1:{run.health_port}/readyz"
                self._wait(f"{run.name} /readyz", deadline, functools.partial(http_ok, url))
            if self.webhooks:
                self._register_webhooks(deadline)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began

    def stop(self) -> None:
        """Delete the webhook configurations, then stop every manager. Safe to repeat."""
        try:
            if self.webhook_configurations and self.cp.running:
                for config in self.webhook_configurations:
                    kind = config["kind"].lower()
                    self.cp.kubectl(
                        "delete", kind, config["metadata"]["name"], "--ignore-not-found"
                    )
        finally:
            self.webhook_configurations = []
            for run in reversed(list(self.running.values())):
                stop_process(run.proc)
            self.running.clear()
            for f in self._logs:
                with contextlib.suppress(OSError):
                    f.close()
            self._logs.clear()

    # ------------------------------------------------------------------ CRDs

    def install_crds(self, builds: Iterable[OperatorBuild], deadline: float) -> None:
        """Each build's CRDs, installed and Established (:func:`install_crds`)."""
        install_crds(self.cp, [build.crds for build in builds], deadline)

    # ------------------------------------------------------------------ processes

    def _dir(self, name: str) -> Path:
        d = self.cp.workdir / "operators" / name
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        return d

    def _certs(self, name: str, under: str = "certs") -> Path:
        """tls.crt/tls.key for 127.0.0.1 and localhost, signed by the control plane's CA, in the
        operator's folder ``under``."""
        d = self._dir(name) / under
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        crt, key = self.cp.issue_cert(f"{name}-webhook", dns_names=("localhost",))
        (d / "tls.crt").write_bytes(crt)
        (d / "tls.key").write_bytes(key)
        (d / "tls.key").chmod(0o600)
        return d

    def _spawn(
        self,
        build: OperatorBuild,
        args: Sequence[str],
        *,
        health_port: int,
        metrics_port: int,
        webhook_port: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        name = build.name
        log_path = self.cp.log_dir / f"{name}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        cmd = [str(build.manager), f"--kubeconfig={self.cp.kubeconfig}", *args]
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        full_env = dict(os.environ)
        full_env["KUBECONFIG"] = str(self.cp.kubeconfig)
        full_env["TMPDIR"] = str(self._dir(name))  # nothing of theirs lands in /tmp
        full_env.update(env or {})
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self._dir(name),
            env=full_env,
            preexec_fn=child_setup,  # setpgid + PDEATHSIG, like the control plane's
        )
        self.running[name] = _Running(name, proc, health_port, metrics_port, webhook_port, log_path)

    def _start_controller(
        self, build: OperatorBuild, api_group: str, env: Mapping[str, str] | None = None
    ) -> None:
        """JobSet and LWS: one layout (kubebuilder, a Configuration file, flags)."""
        health, metrics, webhook = free_port(), free_port(), free_port()
        certs = self._certs(build.name)
        config: dict[str, Any] = {
            "apiVersion": f"{api_group}/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            # off: no Secret, no Service, no patching of webhook configurations
            "internalCertManagement": {"enable": False},
            "webhook": {"port": webhook, "host": "127.0.0.1", "certDir": str(certs)},
            "metrics": {"bindAddress": f"127.0.0.1:{metrics}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        }
        if build.name == "jobset":  # LWS's metrics server has no certDir (self-signed)
            config["metrics"]["certDir"] = str(certs)
        path = self._dir(build.name) / "config.yaml"
        path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        args = [
            f"--config={path}",
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{metrics}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
        ]
        self._spawn(
            build, args, health_port=health, metrics_port=metrics, webhook_port=webhook, env=env
        )

    def _start_jobset(self, build: OperatorBuild) -> None:
        # JobSet always serves its webhooks; they are called only once registered.
        self._start_controller(build, "config.jobset.x-k8s.io")

    def _start_lws(self, build: OperatorBuild) -> None:
        # LWS serves its webhooks unless ENABLE_WEBHOOKS=false; its Pod webhook sets
        # the labels (worker-index, group-index) its own Pod controller needs.
        env = {"ENABLE_WEBHOOKS": "true" if self.webhooks else "false"}
        self._start_controller(build, "config.lws.x-k8s.io", env)

    def _start_kuberay(self, build: OperatorBuild) -> None:
        health, metrics = free_port(), free_port()
        args = [
            "--enable-leader-election=false",
            f"--metrics-addr=127.0.0.1:{metrics}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
            "--log-stdout-encoder=console",
        ]
        if self.kuberay_feature_gates:
            args.append(f"--feature-gates={self.kuberay_feature_gates}")
        # ENABLE_WEBHOOKS=true would start its RayCluster validating webhook on :9443.
        self._spawn(
            build, args, health_port=health, metrics_port=metrics, env={"ENABLE_WEBHOOKS": ""}
        )

    def _start_trainer(self, build: OperatorBuild) -> None:
        # Its Configuration file (config.trainer.kubeflow.org) has no certDir: its webhook
        # server reads controller-runtime's default, $TMPDIR/k8s-webhook-server/serving-certs
        # (TMPDIR is the operator's folder, see _spawn). Leader election is off by default
        # (no leaderElection section); the status server is behind the TrainJobStatus feature
        # gate (alpha, off).
        health, metrics, webhook = free_port(), free_port(), free_port()
        self._certs(build.name, "k8s-webhook-server/serving-certs")
        config: dict[str, Any] = {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "certManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": webhook},
            "metrics": {"bindAddress": f"127.0.0.1:{metrics}", "secureServing": False},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        }
        path = self._dir(build.name) / "config.yaml"
        path.write_text(json.dumps(config, indent=2))
        self._spawn(
            build,
            [f"--config={path}"],
            health_port=health,
            metrics_port=metrics,
            webhook_port=webhook,
        )

    # ------------------------------------------------------------------ webhooks

    def _register_webhooks(self, deadline: float) -> None:
        ca_bundle = base64.b64encode(self.cp.ca_pem).decode()
        for name in WEBHOOK_OPERATORS:
            run = self.running.get(name)
            if run is None or run.webhook_port is None:
                continue
            configs = url_mode(
                upstream_webhook_configurations(self.builds[name]),
                f"{name}-",
                f"https://127.0.0.1:{run.webhook_port}",
                ca_bundle,
            )
            self.cp.kubectl(
                "apply",
                "-f",
                "-",
                input="\n".join(json.dumps(c) for c in configs),
                check=True,
            )
            self.webhook_configurations += configs
        for name in WEBHOOK_OPERATORS:
            if name not in self.running:
                continue
            with self._canary_objects(name):
                for canary in _canaries(name):
                    probe = functools.partial(self._canary_live, canary)
                    self._wait(canary.what, deadline, probe)

    @contextlib.contextmanager
    def _canary_objects(self, name: str) -> Iterator[None]:
        """What an operator's canaries need stored while they are probed (Trainer's TrainJob
        canary: its runtime), deleted afterwards."""
        stored = [_TRAINER_CANARY_RUNTIME] if name == "trainer" else []
        manifest = "\n".join(json.dumps(obj) for obj in stored)
        if stored:
            self.cp.kubectl("create", "-f", "-", input=manifest, check=True)
        try:
            yield
        finally:
            if stored:
                self.cp.kubectl("delete", "--ignore-not-found", "-f", "-", input=manifest)

    def _canary_live(self, canary: _Canary) -> bool:
        result = self.cp.kubectl(
            "create",
            "--dry-run=server",
            "-n",
            "default",
            "-o",
            "json",
            "-f",
            "-",
            input=json.dumps(canary.manifest),
        )
        return canary.live(result)

    # ------------------------------------------------------------------ internals

    def check_alive(self) -> None:
        """Raise OperatorError, with its log tail, if a manager has exited."""
        runs = self.running.values()
        check_alive(((r.name, r.proc, r.log) for r in runs), OperatorError)

    def _wait(self, what: str, deadline: float, probe: Callable[[], bool]) -> None:
        wait_until(what, deadline, probe, self.check_alive, OperatorError)
