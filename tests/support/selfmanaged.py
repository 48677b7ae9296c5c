"""The selfManaged certificate mode in tests: the chart's objects applied to a real API server,
a kubeconfig for the chart's ServiceAccount (a token from the TokenRequest API, so the server
has exactly the chart's RBAC), `tpu-webhook serve` processes in that mode on loopback, and what
they serve and what the configurations trust, read as the API server would check it.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from dev.controlplane import ControlPlane
from dev.processes import free_port, stop_process
from dev.tools import REPO_ROOT
from tests.support.chart_identity import token_kubeconfig

CHART = REPO_ROOT / "charts" / "tpu-webhook"
KINDS = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
#: Short waits so a whole renewal takes seconds (the chart's defaults are minutes).
FAST = {
    "TPU_WEBHOOK_CERT_SYNC_SECONDS": "0.3",
    "TPU_WEBHOOK_CERT_PROPAGATION_SECONDS": "1.5",
    "TPU_WEBHOOK_CERT_OVERLAP_SECONDS": "4",
    "TPU_WEBHOOK_CERT_RELOAD_FAILING_SECONDS": "3",
}


@dataclass(frozen=True)
class Release:
    """The chart rendered by `helm template` in selfManaged mode and applied with kubectl."""

    name: str
    namespace: str

    @property
    def fullname(self) -> str:
        return f"{self.name}-tpu-webhook"

    @property
    def secret(self) -> str:
        return f"{self.fullname}-certs"

    @property
    def ca_secret(self) -> str:
        """The CA-only Secret (ca.crt alone) the server copies its CAs into."""
        return f"{self.fullname}-ca-bundle"

    @property
    def user(self) -> str:
        """The chart's ServiceAccount as the API server names the requests made with its token."""
        return f"system:serviceaccount:{self.namespace}:{self.fullname}"

    @property
    def service_host(self) -> str:
        """The name the API server checks the served certificate against."""
        return f"{self.fullname}.{self.namespace}.svc"

    def values(self) -> list[str]:
        sets = {
            "certificates.mode": "selfManaged",
            "image.repository": "localhost/tpu-webhook",
            # Nothing serves the Service here: never let these configurations refuse a create.
            "webhook.failurePolicy": "Ignore",
        }
        return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]

    def render(self, cp: ControlPlane) -> str:
        args = ["template", self.name, str(CHART), "-n", self.namespace, *self.values()]
        return cp.helm(*args, check=True).stdout

    def apply(self, cp: ControlPlane) -> None:
        if cp.kubectl("get", "namespace", self.namespace).returncode != 0:
            cp.kubectl("create", "namespace", self.namespace, check=True)
        cp.kubectl("apply", "-f", "-", input=self.render(cp), check=True)

    def delete(self, cp: ControlPlane) -> None:
        cp.kubectl("delete", "-f", "-", "--wait=false", input=self.render(cp))
        cp.kubectl("delete", "namespace", self.namespace, "--wait=false")

    def secret_json(self, cp: ControlPlane) -> dict[str, Any]:
        return get_json(cp, "secret", self.secret, "-n", self.namespace)

    def secret_data(self, cp: ControlPlane, name: str = "") -> dict[str, bytes]:
        """The data of the Secret (or of the Secret `name` of the release namespace), decoded."""
        secret = get_json(cp, "secret", name or self.secret, "-n", self.namespace)
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}

    def ca_bundles(self, cp: ControlPlane) -> dict[str, bytes]:
        """Per webhook entry (<kind>/<entry name>), its caBundle as PEM (b"" when unset)."""
        return {
            f"{kind}/{entry['name']}": base64.b64decode(entry["clientConfig"].get("caBundle", ""))
            for kind in KINDS
            for entry in get_json(cp, kind, self.fullname).get("webhooks", [])
        }

    def service_account_kubeconfig(self, cp: ControlPlane, path: Path) -> Path:
        """A kubeconfig with a token of the chart's ServiceAccount (TokenRequest, 1 h)."""
        return token_kubeconfig(cp, self.fullname, self.namespace, path)

    def server_env(self, kubeconfig: Path, **extra: str) -> dict[str, str]:
        """The environment the chart's Deployment gives the server, out of a cluster."""
        return {
            "TPU_WEBHOOK_CERT_SECRET": self.secret,
            "TPU_WEBHOOK_CERT_SECRET_NAMESPACE": self.namespace,
            "TPU_WEBHOOK_CERT_CA_SECRET": self.ca_secret,
            "TPU_WEBHOOK_CERT_SERVICE": self.fullname,
            "TPU_WEBHOOK_CERT_MUTATING_CONFIGURATION": self.fullname,
            "TPU_WEBHOOK_CERT_VALIDATING_CONFIGURATION": self.fullname,
            "TPU_WEBHOOK_KUBECONFIG": str(kubeconfig),
            **FAST,
            **extra,
        }


def get_json(cp: ControlPlane, *args: str) -> Any:
    return json.loads(cp.kubectl("get", *args, "-o", "json", check=True).stdout)


def pem_certificates(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem) if pem.strip() else []


@dataclass
class SelfManagedServer:
    """`python -m webhook serve` in selfManaged mode on 127.0.0.1 (always stopped)."""

    env: Mapping[str, str]
    log: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0

    def start(self) -> SelfManagedServer:
        self.started_at = time.monotonic()
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "webhook", "serve", "--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **self.env},
            )
        return self

    def readyz(self) -> tuple[int, dict[str, Any]]:
        """GET /readyz as the kubelet probes it (TLS, the certificate not verified)."""
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{self.port}/readyz", context=_unverified(), timeout=3
            ) as response:
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as error:
            return int(error.code), json.loads(error.read())
        except (urllib.error.URLError, ConnectionError, ssl.SSLError, TimeoutError):
            return 0, {}

    def wait_ready(self, timeout: float = 30.0) -> float:
        """Seconds from start to the first 200 from /readyz."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.logs()}")
            if self.readyz()[0] == 200:
                return time.monotonic() - self.started_at
            time.sleep(0.05)
        raise RuntimeError(f"not ready after {timeout} s: {self.readyz()}\n{self.logs()}")

    def served(self) -> x509.Certificate:
        """The certificate the server presents now (a new handshake)."""
        with (
            socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock,
            _unverified().wrap_socket(sock) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der)

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 30)

    def __enter__(self) -> SelfManagedServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def verifies(served: x509.Certificate, bundle: bytes, host: str) -> bool:
    """Whether a TLS client trusting only `bundle` accepts `served` for `host`, as the API
    server does with a configuration's caBundle (chain and name checked by OpenSSL)."""
    store = x509.verification.Store(pem_certificates(bundle)) if bundle.strip() else None
    if store is None:
        return False
    verifier = (
        x509.verification.PolicyBuilder().store(store).build_server_verifier(x509.DNSName(host))
    )
    try:
        verifier.verify(served, [])
    except x509.verification.VerificationError:
        return False
    return True


def pem_of(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _unverified() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
