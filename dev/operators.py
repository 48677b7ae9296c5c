"""The real JobSet, LeaderWorkerSet, KubeRay and Kubeflow Trainer operators, run on a
:class:`ControlPlane`.

Each operator's controller manager is built from its released Go module
(dev/operator_builds.py); dev/operator_crds.py finds the CRDs alone without a build (`make
run`'s default). :class:`Operators` installs the CRDs (server-side apply, then waits until
Established), starts each manager as a process on loopback with the control plane's admin
kubeconfig, leader election off, metrics and health probes on free loopback ports, and always
stops them.

JobSet's, LeaderWorkerSet's and Trainer's own admission webhooks run in url mode: their
internal cert management (a cert-controller writing a Secret for a Service) is off in their
configuration file, their webhook server listens on 127.0.0.1 with a certificate from the
control plane's CA, and Mutating/Validating configurations copied from each module's webhook
``manifests.yaml`` (with its kustomize patches) point at ``https://127.0.0.1:<port><path>``
(dev/operator_webhooks.py). KubeRay's optional (validation-only) webhook stays off: it binds the
fixed port 9443 on every interface, which parallel sessions on a shared machine would fight
over. Trainer drives JobSets: it needs JobSet's CRD and controller running (the e2e suite starts
it on its own, after the others). Usage::

    with ControlPlane() as cp, Operators(cp) as ops:
        cp.kubectl("apply", "-f", "jobset.yaml", check=True)
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from dev.controlplane import ControlPlane
from dev.operator_builds import OperatorBuild, OperatorError, operator_builds
from dev.operator_crds import install_crds
from dev.operator_webhooks import (
    WEBHOOK_OPERATORS,
    Canary,
    canaries,
    canary_objects,
    upstream_webhook_configurations,
    url_mode,
)
from dev.processes import (
    Started,
    check_alive,
    child_setup,
    free_port,
    http_ok,
    stop_process,
    wait_until,
)


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
                for canary in canaries(name):
                    probe = functools.partial(self._canary_live, canary)
                    self._wait(canary.what, deadline, probe)

    @contextlib.contextmanager
    def _canary_objects(self, name: str) -> Iterator[None]:
        """What an operator's canaries need stored while they are probed (Trainer's TrainJob
        canary: its runtime), deleted afterwards."""
        stored = canary_objects(name)
        manifest = "\n".join(json.dumps(obj) for obj in stored)
        if stored:
            self.cp.kubectl("create", "-f", "-", input=manifest, check=True)
        try:
            yield
        finally:
            if stored:
                self.cp.kubectl("delete", "--ignore-not-found", "-f", "-", input=manifest)

    def _canary_live(self, canary: Canary) -> bool:
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
