"""Readiness over real TLS: /readyz answers 503 once the served certificate has expired, or once
changed certificate files have kept failing to load, and 200 again when a good pair arrives.

The probe is made as kubelet makes it: HTTPS without verifying the server's certificate (an
expired certificate must still be probed, and kubelet never verifies).
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import ssl
import time
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.catalog_facts import READY
from tests.support.webhook_process import WebhookProcess, make_certs
from webhook.certificates.create import KeyPair, make_serving_cert, write_pair
from webhook.serving.tls import ServingTLS

FAILING_SECONDS = 1.0  # the server's cert_reload_failing_seconds in these tests


def probe(server: WebhookProcess) -> tuple[int, dict[str, Any]]:
    """GET /readyz as kubelet does: TLS, no verification of the certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=5)
    try:
        connection.request("GET", "/readyz")
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def wait_for_status(server: WebhookProcess, status: int, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    seen: tuple[int, dict[str, Any]] = (0, {})
    while time.monotonic() < deadline:
        seen = probe(server)
        if seen[0] == status:
            return seen[1]
        time.sleep(0.05)
    raise AssertionError(f"/readyz never answered {status}; last: {seen}")


def expired(ca: KeyPair) -> KeyPair:
    """A serving certificate for 127.0.0.1 from `ca` that expired an hour ago."""
    fresh = make_serving_cert(ca, ["localhost"], ["127.0.0.1"])
    leaf = fresh.certificate
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(leaf.subject)
        .issuer_name(leaf.issuer)
        .public_key(leaf.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=2))
        .not_valid_after(now - dt.timedelta(hours=1))
    )
    for extension in leaf.extensions:
        builder = builder.add_extension(extension.value, extension.critical)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), fresh.key_pem)


def served_serial(server: WebhookProcess) -> int:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        ssl.create_connection(("127.0.0.1", server.port)) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def server_and_ca(tmp_path: Path) -> tuple[WebhookProcess, KeyPair]:
    ca = make_certs(tmp_path)
    env = {"TPU_WEBHOOK_CERT_RELOAD_FAILING_SECONDS": str(FAILING_SECONDS)}
    return WebhookProcess(tmp_path, env=env), ca  # started by `with`


def test_an_expired_certificate_is_not_ready_and_a_renewed_one_is(tmp_path: Path) -> None:
    server, ca = server_and_ca(tmp_path)
    with server:
        assert probe(server) == (
            200,
            READY,
        )
        old = expired(ca)
        write_pair(tmp_path, ca, old)
        body = wait_for_status(server, 503)
        assert served_serial(server) == old.certificate.serial_number  # it was loaded
        assert body["status"] == "not ready"
        assert body["certificate"] is False
        assert body["reason"].startswith("serving certificate expired at ")
        write_pair(tmp_path, ca, make_serving_cert(ca, ["localhost"], ["127.0.0.1"]))
        assert wait_for_status(server, 200)["certificate"] is True


def test_certificate_files_that_keep_failing_to_load_are_not_ready(tmp_path: Path) -> None:
    server, ca = server_and_ca(tmp_path)
    with server:
        serving = served_serial(server)
        (tmp_path / "tls.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nbroken\n")
        body = wait_for_status(server, 503)
        assert body["reason"].startswith("certificate files changed ")
        assert "cannot be loaded: new certificate files not usable yet" in body["reason"]
        assert served_serial(server) == serving, "the old pair is still served meanwhile"
        write_pair(tmp_path, ca, make_serving_cert(ca, ["localhost"], ["127.0.0.1"]))
        assert wait_for_status(server, 200)["certificate"] is True
        assert served_serial(server) != serving


def test_a_failure_shorter_than_the_grace_period_stays_ready(tmp_path: Path) -> None:
    make_certs(tmp_path)
    tls = ServingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", failing_grace_seconds=60)
    (tmp_path / "tls.key").write_bytes(b"not a key")
    assert tls.reload_if_changed() is False
    assert tls.failing_since is not None
    assert tls.problem(monotonic=tls.failing_since + 59) == ""
    assert tls.problem(monotonic=tls.failing_since + 60).startswith("certificate files changed 60")


def test_readiness_reads_the_clock_at_each_probe(tmp_path: Path) -> None:
    make_certs(tmp_path)
    tls = ServingTLS(tmp_path / "tls.crt", tmp_path / "tls.key")
    assert tls.not_after is not None
    assert tls.problem(now=tls.not_after - dt.timedelta(seconds=1)) == ""
    assert tls.problem(now=tls.not_after).startswith("serving certificate expired at ")
