"""Security: TLS 1.2+ with AEAD ciphers only, client certificates, quiet logs and error bodies.

The dependency audit is tests/image/test_dependency_audit.py (what the image ships).
"""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from tests.robustness.conftest import (
    Connection,
    assert_clean_error_body,
    multi_host_job,
    review,
    run_async,
    single_host_pod,
)
from tests.support.webhook_process import WebhookProcess, make_certs
from webhook.certificates.create import make_ca, make_serving_cert

SENTINEL = "s3cr3t-sentinel-7f1c"
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookProcess]:
    directory = tmp_path_factory.mktemp("security-certs")
    make_certs(directory)
    with WebhookProcess(directory) as process:
        yield process


# ---- protocol versions and ciphers ----------------------------------------------------------


@pytest.fixture(scope="module")
def openssl(debian_packages: None) -> str:
    """The openssl CLI (Debian package openssl; `make setup` installs it)."""
    found = shutil.which("openssl")
    assert found is not None
    return found


def s_client(server: WebhookProcess, openssl: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            openssl,
            "s_client",
            *("-connect", f"127.0.0.1:{server.port}", "-servername", "localhost"),
            *("-CAfile", str(server.ca_file), *args),
        ],
        input="",
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


@pytest.mark.debian
@pytest.mark.parametrize(
    "args",
    [
        # @SECLEVEL=0 lets the client offer what OpenSSL 3 would otherwise refuse by itself
        ("-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"),
        ("-tls1", "-cipher", "DEFAULT@SECLEVEL=0"),
        ("-tls1_2", "-cipher", "AES128-SHA"),
        ("-tls1_2", "-cipher", "AES256-GCM-SHA384"),  # no forward secrecy
        ("-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-SHA"),  # CBC, not AEAD
        ("-tls1_2", "-cipher", "DHE-RSA-AES128-GCM-SHA256"),
    ],
    ids=" ".join,
)
def test_openssl_old_protocols_and_weak_ciphers_are_refused(
    tls_server: WebhookProcess, openssl: str, args: tuple[str, ...]
) -> None:
    result = s_client(tls_server, openssl, *args)
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Cipher is (NONE)" in result.stdout, result.stdout[-2000:]


@pytest.mark.debian
@pytest.mark.parametrize(
    ("args", "protocol"), [(("-tls1_2",), "TLSv1.2"), (("-tls1_3",), "TLSv1.3")], ids=str
)
def test_openssl_tls_1_2_and_1_3_get_forward_secret_aead_ciphers(
    tls_server: WebhookProcess, openssl: str, args: tuple[str, ...], protocol: str
) -> None:
    result = s_client(tls_server, openssl, *args)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"New, {protocol}, Cipher is " in result.stdout, result.stdout[-2000:]
    cipher = result.stdout.split("Cipher is ", 1)[1].split()[0]
    assert protocol != "TLSv1.2" or cipher.startswith("ECDHE-"), cipher  # forward secret
    assert "GCM" in cipher or "CHACHA20" in cipher, cipher
    assert "Verify return code: 0 (ok)" in result.stdout


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize(
    "version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1], ids=["tls1.0", "tls1.1"]
)
def test_python_clients_limited_to_old_protocols_are_refused(
    tls_server: WebhookProcess, version: ssl.TLSVersion
) -> None:
    context = tls_server.ssl_context()
    context.set_ciphers("DEFAULT@SECLEVEL=0")
    context.minimum_version = version
    context.maximum_version = version
    connection = http.client.HTTPSConnection("127.0.0.1", tls_server.port, context=context)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        connection.request("GET", "/healthz")
    connection.close()


# ---- client certificates ----------------------------------------------------------------------


def test_a_client_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    make_certs(tmp_path, client=True)
    stranger_ca = make_ca("someone-else")
    stranger = make_serving_cert(stranger_ca, ["kube-apiserver"], client=True)
    (tmp_path / "stranger.crt").write_bytes(stranger.cert_pem)
    (tmp_path / "stranger.key").write_bytes(stranger.key_pem)
    server = WebhookProcess.requiring_client_certs(tmp_path)
    trusted = server.ssl_context()
    with server:
        ok = http.client.HTTPSConnection("127.0.0.1", server.port, context=trusted)
        ok.request("GET", "/healthz")
        assert ok.getresponse().status == 200
        ok.close()
        other = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        other.load_cert_chain(str(tmp_path / "stranger.crt"), str(tmp_path / "stranger.key"))
        refused = http.client.HTTPSConnection("127.0.0.1", server.port, context=other)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            post_and_read(refused)  # TLS 1.3 reports the refusal on the first read
        refused.close()


def post_and_read(connection: http.client.HTTPSConnection) -> int:
    connection.request("POST", "/validate", b"{}", {"Content-Type": "application/json"})
    return connection.getresponse().status


# ---- logs and error bodies --------------------------------------------------------------------


def secret_pod() -> dict[str, object]:
    pod = single_host_pod(
        env=[{"name": "API_TOKEN", "value": SENTINEL}],
        command=["run", f"--password={SENTINEL}"],
        image=f"registry/{SENTINEL}:1",
    )
    pod["metadata"]["annotations"] = {"note": SENTINEL}  # type: ignore[index]
    pod["metadata"]["labels"] = {"team": SENTINEL}  # type: ignore[index]
    return pod


def test_info_logs_carry_no_object_bodies_or_secret_values(tls_server: WebhookProcess) -> None:
    job = multi_host_job(env=[{"name": "TOKEN", "value": SENTINEL}])
    bad_chips = single_host_pod(chips="3", env=[{"name": "TOKEN", "value": SENTINEL}])
    reviews = [
        ("/mutate", review(secret_pod(), uid="log-1")),
        ("/validate", review(bad_chips, uid="log-2")),
        ("/validate/warn", review(bad_chips, uid="log-3")),
        ("/mutate", review(job, "Job", "batch", uid="log-4")),
        ("/validate", review(job, "Job", "batch", uid="log-5", operation="UPDATE", oldObject=job)),
    ]
    malformed = [
        orjson.dumps(review(secret_pod()))[:-40],  # truncated
        orjson.dumps({"apiVersion": SENTINEL, "kind": "AdmissionReview"}),
        b'{"request": {"uid": "' + SENTINEL.encode() + b'", "object": NaN}}',
        b"[" * 5000 + SENTINEL.encode(),
    ]

    async def send() -> None:
        connection = await Connection.open(tls_server.port, tls_server.ssl_context())
        try:
            for path, body in reviews:
                assert (await connection.post(path, orjson.dumps(body))).status == 200
            for body in malformed:
                assert (await connection.post("/validate", body)).status in (400, 500)
        finally:
            await connection.close()

    run_async(send())
    logs = tls_server.wait_for_log('"uid":"log-5"')  # review lines are written in batches
    uids = {json.loads(line).get("uid") for line in logs.splitlines() if line.startswith("{")}
    assert {"log-1", "log-2", "log-3", "log-4", "log-5"} <= uids, "review lines are logged"
    assert SENTINEL not in logs
    for line in logs.splitlines():
        assert len(line) < 4096, f"a log line of {len(line)} characters"


def test_a_name_cannot_forge_log_lines(tls_server: WebhookProcess) -> None:
    pod = single_host_pod()
    forged = '{"level":"error","msg":"forged"}'
    pod["metadata"]["name"] = f"x\n{forged}\r\n"
    run_async(_post_once(tls_server, "/validate", orjson.dumps(review(pod, uid="forge"))))
    for line in tls_server.wait_for_log('"uid":"forge"').splitlines():
        assert json.loads(line) != json.loads(forged)


async def _post_once(server: WebhookProcess, path: str, body: bytes) -> None:
    connection = await Connection.open(server.port, server.ssl_context())
    try:
        assert (await connection.post(path, body)).status == 200
    finally:
        await connection.close()


def test_error_responses_over_tls_carry_no_traceback(tls_server: WebhookProcess) -> None:
    cases = [
        ("POST", "/validate", b"{"),
        (
            "POST",
            "/validate",
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",'
            b'"request":{"uid":"u","object":' + b"[" * 5000 + b"]" * 5000 + b"}}",
        ),
        ("GET", "/mutate", b""),
        ("POST", "/nowhere", b"{}"),
        ("POST", "/docs", b"{}"),
    ]
    for method, path, body in cases:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", tls_server.port, context=tls_server.ssl_context()
        )
        connection.request(method, path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        connection.close()
        assert_clean_error_body(response.status, data)


def test_an_error_message_does_not_echo_a_huge_input(app_client: TestClient) -> None:
    body = orjson.dumps({"apiVersion": "x" * 1_000_000, "kind": "AdmissionReview"})
    response = app_client.post(
        "/validate", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert len(response.content) < 1024, f"a {len(response.content)}-byte error echoes the input"


def test_metrics_label_values_stay_bounded_whatever_kinds_clients_send(
    app_client: TestClient,
) -> None:
    """`kind` and `operation` come from the request: each new value must not be a new series.

    Anyone who reaches the port can send reviews; unbounded label values grow memory and the
    /metrics page without limit.
    """
    for n in range(500):
        body = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"kind": f"Kind{n}"}, "operation": f"OP{n}"},
        }
        app_client.post(
            "/validate", content=orjson.dumps(body), headers={"content-type": "application/json"}
        )
    series = [
        line
        for line in app_client.get("/metrics").text.splitlines()
        if line.startswith("tpu_webhook_requests_total{")
    ]
    assert len(series) < 100, f"{len(series)} series of tpu_webhook_requests_total"
