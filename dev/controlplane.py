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
import base64
import contextlib
import ctypes
import datetime as dt
import functools
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.certificates.create import make_ca

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO_ROOT / "tests" / "tools" / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm")

#: Controllers run by kube-controller-manager (names as in ``--help`` of 1.35).
DEFAULT_CONTROLLERS: tuple[str, ...] = (
    "job-controller",
    "cronjob-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "garbage-collector-controller",
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "ttl-after-finished-controller",
)

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
BUILD_TIMEOUT_S = 60 * 60  # a cold build on 2 cores measured 261 s; allow for slow proxies
STOP_TIMEOUT_S = 15.0
WORKDIR_PREFIX = "tpu-webhook-cp-"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or queried."""


class CommandError(subprocess.CalledProcessError):
    """A kubectl/helm call failed; unlike CalledProcessError, str() shows stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


@functools.cache
def tools_dir() -> Path:
    """Build (or find cached) tools with build.sh, once per process; return the bin dir."""
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            stdout=subprocess.PIPE,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=True,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise ControlPlaneError(f"{BUILD_SCRIPT} failed: {exc}") from exc
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise ControlPlaneError(f"{BUILD_SCRIPT} printed no bin dir")
    bin_dir = Path(lines[-1])
    missing = [b for b in BINARIES if not (bin_dir / b).is_file()]
    if missing:
        raise ControlPlaneError(f"{bin_dir} lacks {', '.join(missing)}")
    return bin_dir


# --------------------------------------------------------------------------- processes

_PR_SET_PDEATHSIG = 1
_live: set[ControlPlane] = set()


def _child_setup() -> None:  # pragma: no cover - runs in the forked child
    """New process group, and SIGKILL when the parent (the test process) dies."""
    os.setpgid(0, 0)
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stop_process(
    proc: subprocess.Popen[Any],
    timeout: float = STOP_TIMEOUT_S,
    first: signal.Signals = signal.SIGTERM,
) -> int | None:
    """`first` to the process group (the process was started in a session of its own), SIGKILL
    to the group after ``timeout``; always reap. The exit status (None if it never ended)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, first)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    # The leader may be gone while group members linger: kill the group regardless.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout)
    return proc.returncode


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


# ------------------------------------------------------------------------- certificates


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class _CA:
    def __init__(self) -> None:
        pair = make_ca("tpu-webhook-e2e-ca", days=7)  # the webhook's own CA maker
        key = serialization.load_pem_private_key(pair.key_pem, password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        self.key = key
        self.cert = pair.certificate

    def issue(
        self,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
    ) -> tuple[bytes, bytes]:
        """Return (cert PEM, key PEM) for a leaf certificate signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages: list[x509.ObjectIdentifier] = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if usages:
            builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ip_addresses]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return _cert_pem(cert), _key_pem(key)


# ------------------------------------------------------------------------ control plane


class Started:
    """`with Thing() as thing:` starts it and always stops it, also when the body fails."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> object:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


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
        self._ca: _CA | None = None
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
        return _cert_pem(self._ca.cert)

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
            preexec_fn=_child_setup,  # setpgid + PDEATHSIG only
        )
        self._procs.append((name, proc))
        return proc

    def _check_alive(self) -> None:
        check_alive(((n, p, self.log_dir / f"{n}.log") for n, p in self._procs), ControlPlaneError)

    def _wait(self, what: str, deadline: float, probe: Callable[[], Any]) -> None:
        wait_until(what, deadline, probe, self._check_alive, ControlPlaneError)

    def _write(self, name: str, data: bytes, mode: int = 0o600) -> Path:
        path = self.workdir / "pki" / name
        path.write_bytes(data)
        path.chmod(mode)
        return path

    def _start(self, bin_dir: Path, deadline: float) -> None:
        wd = self.workdir
        for sub in ("pki", "logs", "etcd", "home", "apiserver-certs", "kcm-certs"):
            (wd / sub).mkdir(mode=0o700)

        # Certificates and keys.
        ca = self._ca = _CA()
        ca_crt = self._write("ca.crt", _cert_pem(ca.cert), 0o644)
        srv_crt, srv_key = ca.issue(
            "kube-apiserver",
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ip_addresses=("127.0.0.1", "10.0.0.1"),
            server=True,
        )
        apiserver_crt = self._write("apiserver.crt", srv_crt, 0o644)
        apiserver_key = self._write("apiserver.key", srv_key)
        adm_crt, adm_key = ca.issue("e2e-admin", organizations=("system:masters",), client=True)
        admin_crt = self._write("admin.crt", adm_crt, 0o644)
        admin_key = self._write("admin.key", adm_key)
        sa_key_obj = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        sa_key = self._write("sa.key", _key_pem(sa_key_obj))
        sa_pub = self._write(
            "sa.pub",
            sa_key_obj.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            0o644,
        )

        ctx = ssl.create_default_context(cafile=str(ca_crt))
        ctx.load_cert_chain(str(admin_crt), str(admin_key))
        self._ssl = ctx

        # etcd.
        etcd_client = f"http://127.0.0.1:{_free_port()}"
        etcd_peer = f"http://127.0.0.1:{_free_port()}"
        self._spawn(
            "etcd",
            [
                str(bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={wd / 'etcd'}",
                f"--listen-client-urls={etcd_client}",
                f"--advertise-client-urls={etcd_client}",
                f"--listen-peer-urls={etcd_peer}",
                f"--initial-advertise-peer-urls={etcd_peer}",
                f"--initial-cluster=default={etcd_peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait("etcd /health", deadline, lambda: http_ok(etcd_client + "/health"))

        # kube-apiserver.
        port = _free_port()
        self._server = f"https://127.0.0.1:{port}"
        self._spawn(
            "kube-apiserver",
            [
                str(bin_dir / "kube-apiserver"),
                f"--etcd-servers={etcd_client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={wd / 'apiserver-certs'}",
                f"--tls-cert-file={apiserver_crt}",
                f"--tls-private-key-file={apiserver_key}",
                f"--client-ca-file={ca_crt}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                *self._default_authorization_mode(),
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",
                *self.extra_apiserver_args,
            ],
        )
        self._wait("kube-apiserver /readyz", deadline, lambda: self._get_ok("/readyz"))
        self._version = str(self.get_json("/version")["gitVersion"])
        self._write_kubeconfig(ca.cert, adm_crt, adm_key)

        # kube-controller-manager.
        self._spawn(
            "kube-controller-manager",
            [
                str(bin_dir / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(self.controllers)}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={_free_port()}",
                f"--cert-dir={wd / 'kcm-certs'}",
                f"--root-ca-file={ca_crt}",
                f"--service-account-private-key-file={sa_key}",
                *self.extra_controller_manager_args,
            ],
        )
        self._wait(
            "ServiceAccount default/default",
            deadline,
            lambda: self._get_ok("/api/v1/namespaces/default/serviceaccounts/default"),
        )

    def _default_authorization_mode(self) -> list[str]:
        """RBAC, unless the extra arguments choose (the flag appends: RBAC twice is refused)."""
        if any(a.startswith("--authorization-mode=") for a in self.extra_apiserver_args):
            return []
        return ["--authorization-mode=RBAC"]

    def _get_ok(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(self.server + path, context=self._ssl, timeout=5) as r:
                return int(r.status) == 200
        except urllib.error.HTTPError:
            return False

    def _write_kubeconfig(self, ca_cert: x509.Certificate, crt: bytes, key: bytes) -> None:
        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": b64(_cert_pem(ca_cert)),
                    },
                }
            ],
            "users": [
                {
                    "name": "e2e-admin",
                    "user": {"client-certificate-data": b64(crt), "client-key-data": b64(key)},
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e-admin"}}],
            "current-context": "e2e",
            "preferences": {},
        }
        self.kubeconfig.write_text(json.dumps(cfg, indent=2))  # JSON is valid YAML
        self.kubeconfig.chmod(0o600)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status) == 200
    except urllib.error.HTTPError:
        return False


def check_alive(
    procs: Iterable[tuple[str, subprocess.Popen[bytes], Path]],
    error: type[Exception],
    lines: int = 30,
) -> None:
    """Raise `error`, with the tail of its log, for the first of (name, process, log) that
    has exited."""
    for name, proc, log in procs:
        if proc.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
            raise error(f"{name} exited with {proc.returncode}; log tail:\n{tail}")


def wait_until(
    what: str,
    deadline: float,
    probe: Callable[[], Any],
    alive: Callable[[], None],
    error: type[Exception],
    expected: tuple[type[Exception], ...] = (OSError, urllib.error.URLError, ValueError),
) -> Any:
    """`probe()`'s first true value before `deadline`, checking `alive()` in between; an
    `expected` error counts as "not yet"."""
    last: object = None
    while time.monotonic() < deadline:
        alive()
        try:
            value = probe()
        except expected as exc:
            last, value = exc, None
        if value:
            return value
        time.sleep(0.2)
    raise error(f"timed out waiting for {what} (last error: {last!r})")
