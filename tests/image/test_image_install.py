"""The image's install step, outside Docker: docker/install.sh into a fresh venv holds exactly
the locked distributions (each file hash-checked) and no installer, its SBOM lists them, and the
installed `tpu-webhook serve` answers /readyz over verified HTTPS and stops cleanly on SIGTERM.

There is no Docker engine here, so this runs the same script the Dockerfile's builder stage runs
(from PyPI, ~15-60 s), and the entrypoint the final stage runs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
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
from packaging.utils import canonicalize_name

from dev.lock import BUILD_LOCK, RUNTIME_LOCK, parse_lock
from dev.processes import free_port
from tests.image.conftest import INSTALL, INSTALL_TIMEOUT_S, REPO_ROOT
from tests.support.audit import installed, lock_packages, sbom_packages

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


@pytest.mark.registry
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


def canonical(packages: list[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(canonicalize_name(name), version) for name, version in packages}


INSTALLERS = {"pip", "setuptools", "wheel"}


@pytest.mark.registry
@pytest.mark.timeout(INSTALL_TIMEOUT_S + 60)
def test_the_venv_holds_exactly_the_locked_distributions_and_no_installer(venv: Path) -> None:
    shipped = canonical(installed(venv / "bin" / "python"))
    version = next(v for name, v in shipped if name == "tpu-webhook")
    assert shipped == canonical(lock_packages(RUNTIME_LOCK)) | {("tpu-webhook", version)}
    assert not {name for name, _ in shipped} & INSTALLERS
    assert not list((venv / "bin").glob("pip*"))
    assert not list((venv / "bin").glob("wheel*"))


@pytest.mark.registry
@pytest.mark.timeout(INSTALL_TIMEOUT_S + 60)
def test_the_sbom_lists_the_venv_with_the_locked_hash_of_each_installed_file(
    venv: Path, sbom: Path
) -> None:
    bom = json.loads(sbom.read_text())
    assert bom["bomFormat"] == "CycloneDX"
    assert bom["metadata"]["component"]["name"] == "tpu-webhook"
    assert canonical(sbom_packages(sbom)) == canonical(installed(venv / "bin" / "python"))
    locked = {pin.name: set(pin.hashes) for pin in parse_lock(RUNTIME_LOCK.read_text())}
    for component in bom["components"]:
        (digest,) = component["hashes"]
        assert digest["alg"] == "SHA-256"
        assert digest["content"] in locked[canonicalize_name(component["name"])], component["name"]
    # Reproducible: nothing in it depends on when or where it was made.
    assert "serialNumber" not in bom
    assert "timestamp" not in bom["metadata"]
    assert str(venv) not in sbom.read_text()


@pytest.mark.registry
@pytest.mark.usefixtures("pypi")
def test_install_refuses_a_file_whose_hash_is_not_in_the_lock(tmp_path: Path) -> None:
    """A locked release whose downloaded bytes differ from every hash in the lock stops the build
    before anything is installed (here: six's real wheel against a forged hash)."""
    src = tmp_path / "src"
    (src / "docker").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, src / name)
    shutil.copytree(REPO_ROOT / "webhook", src / "webhook")
    shutil.copy(RUNTIME_LOCK, src / "docker" / RUNTIME_LOCK.name)
    (six,) = [pin for pin in parse_lock(BUILD_LOCK.read_text()) if pin.name == "six"]
    forged = f"{six.name}=={six.version} --hash=sha256:{'0' * 64}\n"
    (src / "docker" / BUILD_LOCK.name).write_text(forged)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV"))}
    env["PYTHON"] = sys.executable
    proc = subprocess.run(
        ["sh", str(INSTALL), str(tmp_path / "venv"), str(src), str(tmp_path / "sbom.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert "DO NOT MATCH THE HASHES" in proc.stderr
    assert "0" * 64 in proc.stderr
    assert not (tmp_path / "venv").exists()
    assert not (tmp_path / "sbom.json").exists()


def test_install_script_explains_its_arguments(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["sh", str(INSTALL)], capture_output=True, text=True, timeout=10, check=False
    )
    assert proc.returncode == 2
    assert "usage:" in proc.stderr
    proc = subprocess.run(
        ["sh", str(INSTALL), str(tmp_path / "venv"), str(tmp_path), str(tmp_path / "sbom")],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert proc.returncode == 2
    assert "SRC_DIR must be the repository root" in proc.stderr
    assert not (tmp_path / "venv").exists()
