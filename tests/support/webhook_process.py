"""A real `tpu-webhook serve` process on loopback, started and always stopped by tests."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from dev.processes import free_port, stop_process
from webhook.certificates.create import KeyPair, make_ca, make_serving_cert, write_pair


def make_certs(directory: Path, client: bool = False) -> KeyPair:
    """ca.crt/ca.key/tls.crt/tls.key for 127.0.0.1 and localhost; returns the CA."""
    ca = make_ca("tpu-webhook-test-ca")
    write_pair(directory, ca, make_serving_cert(ca, ["localhost"], ["127.0.0.1"]))
    if client:
        pair = make_serving_cert(ca, ["kube-apiserver"], client=True)
        (directory / "client.crt").write_bytes(pair.cert_pem)
        (directory / "client.key").write_bytes(pair.key_pem)
    return ca


@dataclass
class WebhookProcess:
    """`python -m webhook serve` with the given certificate directory and extra flags."""

    certs: Path
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    log: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    client_cert: bool = False  # our clients (readiness too) present certs/client.crt

    @classmethod
    def requiring_client_certs(cls, certs: Path) -> WebhookProcess:
        """Served with --client-ca-file (certificates from `make_certs(certs, client=True)`)."""
        return cls(certs, ["--client-ca-file", str(certs / "ca.crt")], client_cert=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.certs / "ca.crt"

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if self.client_cert:
            context.load_cert_chain(str(self.certs / "client.crt"), str(self.certs / "client.key"))
        return context

    def start(self, timeout: float = 20.0) -> WebhookProcess:
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(
                f"webhook on port {self.port} started twice: one would be left running"
            )
        self.log = self.log or self.certs / f"webhook-{self.port}.log"
        command = [
            sys.executable,
            "-m",
            "webhook",
            "serve",
            "--port",
            str(self.port),
            "--tls-cert-file",
            str(self.certs / "tls.crt"),
            "--tls-key-file",
            str(self.certs / "tls.key"),
            *self.args,
        ]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "TPU_WEBHOOK_CERT_RELOAD_SECONDS": "0.2", **self.env},
            )
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"webhook exited early:\n{self.logs()}")
            try:
                with urllib.request.urlopen(
                    f"{self.url}/readyz", context=self.ssl_context(), timeout=2
                ) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, ssl.SSLError, TimeoutError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"webhook not ready after {timeout}s:\n{self.logs()}")

    def wait_for_log(self, text: str, timeout: float = 5.0) -> str:
        """The log once it contains `text` (review lines are written in batches, 0.25 s apart)."""
        deadline = time.monotonic() + timeout
        while text not in self.logs() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.logs()

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log and self.log.exists() else ""

    def stop(self, timeout: float = 30.0) -> int | None:
        return None if self.process is None else stop_process(self.process, timeout)

    def __enter__(self) -> WebhookProcess:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
