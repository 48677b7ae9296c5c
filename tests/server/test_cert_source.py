"""The certificate-source seam of the server, without an API server: the files modes never load
the `kubernetes` client; a ServingTLS without files serves a placeholder and is not ready until a
pair is loaded from memory; readiness asks the source first; the settings of the selfManaged mode
go together. (The mode itself runs against a real API server in tests/e2e/test_cert_*.py.)
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from fastapi.testclient import TestClient
from pydantic import ValidationError

from tests.support.catalog_facts import ACCELERATORS
from tests.support.webhook_process import make_certs
from webhook.certificates.create import make_ca, make_serving_cert
from webhook.serving.app import create_app
from webhook.serving.tls import ServingTLS
from webhook.settings import Settings


def test_serving_from_files_never_imports_the_kubernetes_client(tmp_path: Path) -> None:
    make_certs(tmp_path)
    script = (
        "import sys\n"
        "from webhook.serving import server\n"
        "from webhook.serving.app import create_app\n"
        "from webhook.serving.tls import ServingTLS\n"
        "from webhook.settings import Settings\n"
        f"tls = ServingTLS(__import__('pathlib').Path('{tmp_path}/tls.crt'), "
        f"__import__('pathlib').Path('{tmp_path}/tls.key'))\n"
        "create_app(Settings(), tls)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def handshake(context: ssl.SSLContext) -> x509.Certificate:
    """The certificate a server with `context` presents (over a socket pair, in memory)."""
    server_side, client_side = socket.socketpair()
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    with server_side, client_side:
        server = context.wrap_socket(server_side, server_side=True, do_handshake_on_connect=False)
        tls = client.wrap_socket(client_side, do_handshake_on_connect=False)
        server.setblocking(False)
        tls.setblocking(False)
        for _ in range(100):
            done = 0
            for end in (tls, server):
                try:
                    end.do_handshake()
                    done += 1
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
            if done == 2:
                break
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_without_files_a_placeholder_answers_but_nothing_counts_as_loaded() -> None:
    tls = ServingTLS(None, None)
    placeholder = make_ca("placeholder", days=1)
    tls.load_placeholder(placeholder.cert_pem, placeholder.key_pem)
    assert handshake(tls.context) == placeholder.certificate
    assert not tls.loaded
    assert tls.problem() == "no serving certificate loaded"
    ca = make_ca()
    pair = make_serving_cert(ca, ["tpu-webhook.sys.svc"])
    assert tls.load_pem(pair.cert_pem, pair.key_pem) is True
    assert tls.load_pem(pair.cert_pem, pair.key_pem) is False  # the same pair: nothing to do
    assert handshake(tls.context) == pair.certificate
    assert tls.problem() == ""


def test_a_pair_that_does_not_match_is_refused_and_the_served_one_kept() -> None:
    tls = ServingTLS(None, None)
    ca = make_ca()
    good, other = make_serving_cert(ca, ["a"]), make_serving_cert(ca, ["b"])
    tls.load_pem(good.cert_pem, good.key_pem)
    with pytest.raises(ssl.SSLError):
        tls.load_pem(good.cert_pem, other.key_pem)
    assert handshake(tls.context) == good.certificate


class Source:
    def __init__(self, problem: str) -> None:
        self.said = problem

    async def run(self) -> None:
        return None

    def problem(self) -> str:
        return self.said


def test_readiness_reports_the_source_before_the_tls_context() -> None:
    tls = ServingTLS(None, None)
    waiting = Source("no serving certificate from Secret sys/certs yet: 403: forbidden")
    with TestClient(create_app(Settings(), tls, waiting)) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "not ready",
        "certificate": False,
        "catalog": ACCELERATORS,
        "reason": "no serving certificate from Secret sys/certs yet: 403: forbidden",
    }


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"cert_secret": "certs"}, "cert_secret needs cert_secret_namespace and cert_service"),
        (
            {
                "cert_secret": "certs",
                "cert_secret_namespace": "sys",
                "cert_service": "tpu-webhook",
                "tls_cert_file": "tls.crt",
                "tls_key_file": "tls.key",
            },
            "cert_secret (selfManaged certificates) excludes tls_cert_file",
        ),
    ],
)
def test_self_managed_settings_go_together(given: dict[str, str], error: str) -> None:
    with pytest.raises(ValidationError, match=error.replace("(", r"\(").replace(")", r"\)")):
        Settings(**given)  # type: ignore[arg-type]
