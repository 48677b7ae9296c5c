"""Real HTTPS on loopback: verification, rotation under a keep-alive client, client certs."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from pathlib import Path

import pytest

from tests.support.webhook_process import WebhookProcess, make_certs
from webhook.certificates.create import make_serving_cert, write_pair
from webhook.serving.tls import ServingTLS

REVIEW = json.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "object": {"metadata": {"name": "p"}, "spec": {}},
        },
    }
).encode()


def get_healthz(connection: http.client.HTTPSConnection) -> int:
    """TLS 1.3 reports a refused client certificate on the first read, not the handshake."""
    connection.request("GET", "/healthz")
    return connection.getresponse().status


def serial_seen(server: WebhookProcess) -> int:
    with (
        ssl.create_connection(("127.0.0.1", server.port)) as raw,
        server.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    from cryptography import x509

    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_answers_a_review_over_https_verified_against_the_ca(tmp_path: Path) -> None:
    make_certs(tmp_path)
    with WebhookProcess(tmp_path) as server:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", server.port, context=server.ssl_context()
        )
        connection.request("POST", "/validate", REVIEW, {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["response"] == {"uid": "u", "allowed": True}
        assert connection.sock is not None
        assert connection.sock.version() in ("TLSv1.2", "TLSv1.3")
        connection.close()


def test_a_client_that_does_not_trust_the_ca_is_refused(tmp_path: Path) -> None:
    make_certs(tmp_path)
    with WebhookProcess(tmp_path) as server:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", server.port, context=ssl.create_default_context()
        )
        with pytest.raises(ssl.SSLCertVerificationError):
            connection.request("GET", "/healthz")


def test_tls_1_2_clients_get_an_ecdhe_aead_cipher(tmp_path: Path) -> None:
    make_certs(tmp_path)
    with WebhookProcess(tmp_path) as server:
        context = server.ssl_context()
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=context)
        connection.request("GET", "/healthz")
        assert connection.getresponse().status == 200
        assert connection.sock is not None
        name, version, _ = connection.sock.cipher()  # type: ignore[attr-defined]
        assert version == "TLSv1.2"
        connection.close()
        assert name.startswith("ECDHE-")
        assert "GCM" in name or "CHACHA20" in name


def test_serving_context_refuses_anything_older_than_tls_1_2(tmp_path: Path) -> None:
    make_certs(tmp_path)
    tls = ServingTLS(tmp_path / "tls.crt", tmp_path / "tls.key")
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
    ciphers = {c["name"] for c in tls.context.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert ciphers
    assert all(c.startswith("ECDHE-") for c in ciphers)


def test_rotated_certificate_reaches_new_connections_without_failing_a_request(
    tmp_path: Path,
) -> None:
    ca = make_certs(tmp_path)
    with WebhookProcess(tmp_path) as server:
        first = serial_seen(server)
        failures: list[str] = []
        sent = 0
        stop = threading.Event()
        connection_closed = threading.Event()

        def keep_sending() -> None:
            nonlocal sent
            connection = http.client.HTTPSConnection(
                "127.0.0.1", server.port, context=server.ssl_context()
            )
            while not stop.is_set():
                try:
                    connection.request(
                        "POST", "/mutate", REVIEW, {"Content-Type": "application/json"}
                    )
                    response = connection.getresponse()
                    response.read()
                    if response.status != 200:
                        failures.append(f"HTTP {response.status}")
                    sent += 1
                except (OSError, http.client.HTTPException) as error:
                    failures.append(repr(error))
            connection.close()
            connection_closed.set()

        client = threading.Thread(target=keep_sending)
        client.start()
        serials = {first}
        try:
            for _ in range(3):
                write_pair(tmp_path, ca, make_serving_cert(ca, ["localhost"], ["127.0.0.1"]))
                deadline = time.monotonic() + 10
                while serial_seen(server) in serials and time.monotonic() < deadline:
                    time.sleep(0.1)
                serials.add(serial_seen(server))
        finally:
            stop.set()
            client.join(10)
            connection_closed.wait(10)
        assert len(serials) == 4, "every rotation is served to new connections"
        assert failures == []
        assert sent > 50


def test_client_certificate_is_required_with_client_ca_file(tmp_path: Path) -> None:
    make_certs(tmp_path, client=True)
    server = WebhookProcess.requiring_client_certs(tmp_path)
    with_cert = server.ssl_context()
    with server:
        trusted = http.client.HTTPSConnection("127.0.0.1", server.port, context=with_cert)
        trusted.request("GET", "/healthz")
        assert trusted.getresponse().status == 200
        trusted.close()
        anonymous = http.client.HTTPSConnection(
            "127.0.0.1",
            server.port,
            context=ssl.create_default_context(cafile=str(tmp_path / "ca.crt")),
        )
        with pytest.raises((ssl.SSLError, ConnectionError)):
            get_healthz(anonymous)
