"""A real, throw-away Kubernetes control plane, for the end-to-end tests and `make run`.

etcd, kube-apiserver and kube-controller-manager (plus kubectl and helm) are built
from Go modules by ``tests/tools/build.sh`` and cached outside the repository.
There is no scheduler, kubelet, kube-proxy or DNS: Pods stay Pending, so tests
assert admission-time effects only. Everything listens on 127.0.0.1 only.

Usage::

    with ControlPlane() as cp:
        cp.kubectl("get", "ns", check=True)
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from dev import components
from dev.components import DEFAULT_CONTROLLERS
from dev.pki import ClusterCA, Pki, cert_pem, kubeconfig, write_pki
from dev.processes import (
    CommandError,
    Started,
    check_alive,
    child_setup,
    free_port,
    http_ok,
    stop_process,
    wait_until,
)
from dev.tools import tools_dir

WORKDIR_PREFIX = "tpu-webhook-cp-"


class ControlPlaneError(RuntimeError):
    """The control plane could not be started or queried."""


_live: set[ControlPlane] = set()


def _sweep_stale_workdirs() -> None:
    """Remove temp dirs of control planes whose test process died (e.g. SIGKILL).

    Their processes were killed with it (PDEATHSIG); only the files were left.
    """
    for d in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            pid = int((d / "owner.pid").read_text())
        except (OSError, ValueError):
            stale = time.time() - d.stat().st_mtime > 3600  # unknown owner: by age
        else:
            try:
                os.kill(pid, 0)
                stale = False
            except ProcessLookupError:
                stale = True
            except PermissionError:
                stale = False
        if stale:
            shutil.rmtree(d, ignore_errors=True)


@atexit.register
def _stop_all() -> None:
    for cp in list(_live):
        cp.stop()


class ControlPlane(Started):
    """etcd + kube-apiserver + kube-controller-manager on loopback, in a temp dir.

    ``start()`` returns when ``/readyz`` is ok and ``default/default`` ServiceAccount
    exists; ``stop()`` always stops every process (controller-manager, apiserver,
    etcd) and removes the temp dir. Use it as a context manager.
    """

    def __init__(
        self,
        bin_dir: Path | None = None,
        *,
        controllers: Sequence[str] = DEFAULT_CONTROLLERS,
        extra_apiserver_args: Sequence[str] = (),
        extra_controller_manager_args: Sequence[str] = (),
        start_timeout: float = 90.0,
    ) -> None:
        self._bin_dir = bin_dir
        self.controllers = tuple(controllers)
        self.extra_apiserver_args = tuple(extra_apiserver_args)
        self.extra_controller_manager_args = tuple(extra_controller_manager_args)
        self.start_timeout = start_timeout
        self._workdir: Path | None = None
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._logs: list[IO[bytes]] = []
        self._ca: ClusterCA | None = None
        self._server = ""
        self._version = ""
        self._ssl: ssl.SSLContext | None = None
        self.start_seconds = 0.0

    # ------------------------------------------------------------------ properties

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            self._bin_dir = tools_dir()
        return self._bin_dir

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise ControlPlaneError("control plane is not started")
        return self._workdir

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        """The API server's https URL, e.g. ``https://127.0.0.1:41234``."""
        if not self._server:
            raise ControlPlaneError("control plane is not started")
        return self._server

    @property
    def version(self) -> str:
        """The API server's ``/version`` gitVersion, e.g. ``v1.35.4``."""
        if not self._version:
            raise ControlPlaneError("control plane is not started")
        return self._version

    @property
    def ca_pem(self) -> bytes:
        """PEM of the CA that signed the API server's serving and client certs."""
        if self._ca is None:
            raise ControlPlaneError("control plane is not started")
        return cert_pem(self._ca.cert)

    @property
    def pki_dir(self) -> Path:
        """ca.crt, admin.crt and admin.key (a system:masters client) among others."""
        return self.workdir / "pki"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    def pid(self, name: str) -> int:
        """The process id of `etcd`, `kube-apiserver` or `kube-controller-manager`."""
        for process_name, proc in self._procs:
            if process_name == name:
                return proc.pid
        raise ControlPlaneError(f"no {name} process")

    @property
    def running(self) -> bool:
        return bool(self._procs) and all(p.poll() is None for _, p in self._procs)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._workdir is not None:
            raise ControlPlaneError("control plane already started")
        bin_dir = self.bin_dir  # may build (minutes, cold): not counted in start_timeout
        began = time.monotonic()
        with contextlib.suppress(OSError):
            _sweep_stale_workdirs()
        self._workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
        (self._workdir / "owner.pid").write_text(str(os.getpid()))
        _live.add(self)
        try:
            self._start(bin_dir, deadline=began + self.start_timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began

    def issue_cert(
        self,
        common_name: str,
        *,
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = ("127.0.0.1",),
        organizations: Sequence[str] = (),
    ) -> tuple[bytes, bytes]:
        """A serving+client cert (PEM cert, PEM key) signed by :attr:`ca_pem`."""
        if self._ca is None:
            raise ControlPlaneError("control plane is not started")
        return self._ca.issue(
            common_name,
            organizations=organizations,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            server=True,
            client=True,
        )

    def stop(self, keep_logs_in: Path | None = None) -> Path | None:
        """Stop all processes (reverse start order) and remove the temp dir.

        With ``keep_logs_in``, the process logs are first copied into that folder
        (created if needed), which is returned. Safe to call more than once.
        """
        try:
            for _name, proc in reversed(self._procs):
                stop_process(proc)
        finally:
            self._procs.clear()
            for f in self._logs:
                with contextlib.suppress(OSError):
                    f.close()
            self._logs.clear()
            _live.discard(self)
        kept: Path | None = None
        workdir, self._workdir = self._workdir, None
        self._server = ""
        if workdir is not None:
            if keep_logs_in is not None and (workdir / "logs").is_dir():
                keep_logs_in.mkdir(parents=True, exist_ok=True)
                shutil.copytree(workdir / "logs", keep_logs_in, dirs_exist_ok=True)
                kept = keep_logs_in
            shutil.rmtree(workdir, ignore_errors=True)
        return kept

    # ------------------------------------------------------------------ commands

    def env(self) -> dict[str, str]:
        """Environment for tools: KUBECONFIG, bin_dir first on PATH, helm/kubectl
        state kept in the temp dir."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        home = self.workdir / "home"
        env["HELM_CACHE_HOME"] = str(home / "helm-cache")
        env["HELM_CONFIG_HOME"] = str(home / "helm-config")
        env["HELM_DATA_HOME"] = str(home / "helm-data")
        env["KUBECACHEDIR"] = str(home / "kube-cache")
        return env

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = False,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        return self._run("kubectl", args, input=input, check=check, timeout=timeout)

    def helm(
        self,
        *args: str,
        input: str | None = None,
        check: bool = False,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        return self._run("helm", args, input=input, check=check, timeout=timeout)

    def get_json(self, path: str, timeout: float = 10.0) -> Any:
        """GET an API path (e.g. ``/version``) with the admin cert; return parsed JSON."""
        req = urllib.request.Request(self.server + path, headers={"Accept": "application/json"})
        with urllib.request.urlopen(req, context=self._ssl, timeout=timeout) as resp:
            return json.loads(resp.read())

    # ------------------------------------------------------------------ internals

    def _run(
        self, tool: str, args: Sequence[str], *, input: str | None, check: bool, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin_dir / tool), *args]
        proc = subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise CommandError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def _spawn(self, name: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        log.write(("$ " + " ".join(args) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            preexec_fn=child_setup,  # setpgid + PDEATHSIG only
        )
        self._procs.append((name, proc))
        return proc

    def _check_alive(self) -> None:
        check_alive(((n, p, self.log_dir / f"{n}.log") for n, p in self._procs), ControlPlaneError)

    def _wait(self, what: str, deadline: float, probe: Callable[[], Any]) -> None:
        wait_until(what, deadline, probe, self._check_alive, ControlPlaneError)

    def _start(self, bin_dir: Path, deadline: float) -> None:
        wd = self.workdir
        for sub in ("pki", "logs", "etcd", "home", "apiserver-certs", "kcm-certs"):
            (wd / sub).mkdir(mode=0o700)
        pki = write_pki(self.pki_dir)
        self._ca = pki.ca
        self._ssl = ssl.create_default_context(cafile=str(pki.ca_crt))
        self._ssl.load_cert_chain(str(pki.admin_crt), str(pki.admin_key))
        etcd_url = self._start_etcd(bin_dir, deadline)
        self._start_apiserver(bin_dir, etcd_url, pki, deadline)
        self._start_controller_manager(bin_dir, pki, deadline)

    def _start_etcd(self, bin_dir: Path, deadline: float) -> str:
        """etcd, once healthy; its client URL."""
        client = f"http://127.0.0.1:{free_port()}"
        peer = f"http://127.0.0.1:{free_port()}"
        self._spawn("etcd", components.etcd(bin_dir, self.workdir / "etcd", client, peer))
        self._wait("etcd /health", deadline, lambda: http_ok(client + "/health"))
        return client

    def _start_apiserver(self, bin_dir: Path, etcd_url: str, pki: Pki, deadline: float) -> None:
        """kube-apiserver, once ready; then its version and the admin kubeconfig."""
        port = free_port()
        self._server = f"https://127.0.0.1:{port}"
        cert_dir = self.workdir / "apiserver-certs"
        args = components.apiserver(
            bin_dir, etcd_url, port, cert_dir, pki, self.extra_apiserver_args
        )
        self._spawn("kube-apiserver", args)
        self._wait("kube-apiserver /readyz", deadline, lambda: self._get_ok("/readyz"))
        self._version = str(self.get_json("/version")["gitVersion"])
        config = kubeconfig(self.server, cert_pem(pki.ca.cert), *pki.admin_pair)
        self.kubeconfig.write_text(json.dumps(config, indent=2))  # JSON is valid YAML
        self.kubeconfig.chmod(0o600)

    def _start_controller_manager(self, bin_dir: Path, pki: Pki, deadline: float) -> None:
        """kube-controller-manager, once it has made the default ServiceAccount."""
        args = components.controller_manager(
            bin_dir,
            self.kubeconfig,
            self.controllers,
            free_port(),
            self.workdir / "kcm-certs",
            pki,
            self.extra_controller_manager_args,
        )
        self._spawn("kube-controller-manager", args)
        self._wait(
            "ServiceAccount default/default",
            deadline,
            lambda: self._get_ok("/api/v1/namespaces/default/serviceaccounts/default"),
        )

    def _get_ok(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(self.server + path, context=self._ssl, timeout=5) as r:
                return int(r.status) == 200
        except urllib.error.HTTPError:
            return False
