"""The image's install step, outside Docker: docker/install.sh into a fresh venv, then the
installed `tpu-webhook serve` answers /readyz over verified HTTPS and stops cleanly on SIGTERM.

There is no Docker engine here, so this runs the same script the Dockerfile's builder stage runs
(from PyPI, ~15-60 s), and the entrypoint the final stage runs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.image.conftest import INSTALL, INSTALL_TIMEOUT_S

READY_TIMEOUT_S = 30
STOP_TIMEOUT_S = 10


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A CA and a serving certificate for 127.0.0.1 and localhost."""
    out = tmp_path_factory.mktemp("certs")
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "image-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = Certs(out / "ca.crt", out / "tls.crt", out / "tls.key")
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    base: str
    cwd: Path
    log: Path
    tls: ssl.SSLContext

    def get(self, path: str) -> tuple[int, bytes]:
        with urllib.request.urlopen(self.base + path, context=self.tls, timeout=5) as resp:
            return int(resp.status), resp.read()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def server(venv: Path, certs: Certs, tmp_path: Path) -> Iterator[Server]:
    """`<venv>/bin/tpu-webhook serve` on a free loopback port, in an empty working directory."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    log = tmp_path / "server.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPU_WEBHOOK_")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(venv / "bin" / "tpu-webhook"),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--tls-cert-file",
                str(certs.cert),
                "--tls-key-file",
                str(certs.key),
            ],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    tls = ssl.create_default_context(cafile=str(certs.ca))
    try:
        yield Server(proc, f"https://127.0.0.1:{port}", cwd, log, tls)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)


def wait_ready(server: Server) -> int:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last: object = None
    while time.monotonic() < deadline:
        assert server.proc.poll() is None, f"server exited early:\n{server.log_text()}"
        try:
            status, _ = server.get("/readyz")
            return status
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = exc
        time.sleep(0.2)
    pytest.fail(f"no /readyz within {READY_TIMEOUT_S} s ({last!r}):\n{server.log_text()}")


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 60)
def test_installed_server_becomes_ready_over_verified_https_and_stops_on_sigterm(
    server: Server,
) -> None:
    assert wait_ready(server) == 200
    status, _ = server.get("/healthz")
    assert status == 200
    status, metrics = server.get("/metrics")
    assert status == 200
    assert b"# TYPE" in metrics

    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=STOP_TIMEOUT_S) == 0, server.log_text()
    # Cert files given: the server wrote nothing (the image runs with a read-only root fs).
    assert list(server.cwd.iterdir()) == []


def test_install_script_explains_its_arguments(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["sh", str(INSTALL)], capture_output=True, text=True, timeout=10, check=False
    )
    assert proc.returncode == 2
    assert "usage:" in proc.stderr
    proc = subprocess.run(
        ["sh", str(INSTALL), str(tmp_path / "venv"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert proc.returncode == 2
    assert "SRC_DIR must be the repository root" in proc.stderr
    assert not (tmp_path / "venv").exists()
