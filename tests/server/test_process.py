"""The `tpu-webhook serve` process: zero-configuration start, shutdown, logs."""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

from dev.processes import free_port
from tests.support.webhook_process import WebhookProcess, make_certs

TPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ml"},
    "spec": {
        "nodeSelector": {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "2x4",
        },
        "containers": [
            {
                "name": "m",
                "image": "i",
                "env": [{"name": "SECRET", "value": "hunter2"}],
                "resources": {"limits": {"google.com/tpu": "3"}},
            }
        ],
    },
}
REVIEW = json.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "uid-42",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "ml",
            "name": "p",
            "object": TPU_POD,
        },
    }
).encode()


def test_cluster_reads_without_credentials_stop_the_start_in_one_line(tmp_path: Path) -> None:
    """The chart reads the cluster by default; run outside a Pod, without a kubeconfig, the
    server says what is missing and exits 2 (it was an "internal error" with status 3)."""
    make_certs(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    pair = [
        "--tls-cert-file",
        str(tmp_path / "tls.crt"),
        "--tls-key-file",
        str(tmp_path / "tls.key"),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "serve", "--port", "0", *pair],
        env={**env, "TPU_WEBHOOK_CLUSTER_OBJECTS": "true"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "error: no credentials for the API server (Service host/port is not set.): in a Pod they "
        "are its ServiceAccount's; elsewhere set TPU_WEBHOOK_KUBECONFIG, or turn off what reads "
        "the cluster (TPU_WEBHOOK_CLUSTER_OBJECTS, TPU_WEBHOOK_OWNER_EVENTS, "
        "TPU_WEBHOOK_CERT_SECRET)"
    )


def test_serve_without_flags_makes_dev_certificates_and_prints_configurations(
    tmp_path: Path,
) -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "webhook", "serve", "--port", str(port)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        status = None
        while status is None and time.monotonic() < deadline:
            try:
                context = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.crt"))
                connection = http.client.HTTPSConnection("127.0.0.1", port, context=context)
                connection.request("GET", "/readyz")
                status = connection.getresponse().status
                connection.close()
            except (OSError, ssl.SSLError):
                time.sleep(0.1)
        assert status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    assert sorted(p.name for p in (tmp_path / "certs").iterdir()) == [
        "ca.crt",
        "ca.key",
        "tls.crt",
        "tls.key",
    ]
    assert f'url": "https://127.0.0.1:{port}/mutate' in out
    assert "ValidatingWebhookConfiguration" in out


def test_logs_one_json_line_per_review_without_the_object(tmp_path: Path) -> None:
    make_certs(tmp_path)
    server = WebhookProcess(tmp_path).start()
    try:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", server.port, context=server.ssl_context()
        )
        connection.request("POST", "/validate", REVIEW, {"Content-Type": "application/json"})
        assert connection.getresponse().status == 200
        connection.close()
    finally:
        server.stop()
    lines = [json.loads(line) for line in server.logs().splitlines() if '"uid"' in line]
    assert len(lines) == 1
    line = lines[0]
    assert {
        k: line[k]
        for k in ("uid", "kind", "namespace", "name", "operation", "allowed", "rules", "patch_ops")
    } == {
        "uid": "uid-42",
        "kind": "Pod",
        "namespace": "ml",
        "name": "p",
        "operation": "CREATE",
        "allowed": False,
        "rules": ["tpu.chips-per-host"],
        "patch_ops": 0,
    }
    assert isinstance(line["duration_ms"], float)
    assert "hunter2" not in server.logs()


def test_sigterm_answers_every_request_it_was_sent_then_refuses_connections(
    tmp_path: Path,
) -> None:
    """Four keep-alive clients send back to back through SIGTERM. Every request written on an
    open connection gets its 200 (after the signal with `Connection: close`); the only error
    allowed is a refused reconnect once the signal was sent. A request lost on the way fails."""
    make_certs(tmp_path)
    server = WebhookProcess(tmp_path).start()
    clients = 4
    answered = [0] * clients
    ended: list[str] = []  # how each client stopped
    sending = [threading.Event() for _ in range(clients)]
    signalled = threading.Event()

    def client(number: int) -> None:
        connection: http.client.HTTPSConnection | None = None
        try:
            while True:
                if connection is None:
                    connection = http.client.HTTPSConnection(
                        "127.0.0.1", server.port, context=server.ssl_context(), timeout=10
                    )
                    try:
                        connection.connect()
                    except OSError:  # ssl.SSLError included
                        if not signalled.is_set():
                            raise
                        ended.append("refused after SIGTERM")
                        return
                connection.request(
                    "POST", "/validate", REVIEW, {"Content-Type": "application/json"}
                )
                response = connection.getresponse()  # an error here is a dropped request
                body = json.loads(response.read())
                assert response.status == 200, response.status
                assert body["response"]["uid"] == "uid-42"
                answered[number] += 1
                sending[number].set()
                if response.getheader("connection") == "close":
                    connection.close()
                    connection = None
        except Exception as error:
            ended.append(f"{type(error).__name__}: {error}")
        finally:
            if connection is not None:
                connection.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    assert all(event.wait(10) for event in sending), "every client is answered before SIGTERM"
    assert server.process is not None
    before = sum(answered)
    started = time.monotonic()
    signalled.set()
    os.kill(server.process.pid, signal.SIGTERM)
    code = server.process.wait(30)
    elapsed = time.monotonic() - started
    for thread in threads:
        thread.join(10)
    assert code == 0
    assert elapsed < 25, "within the chart's 30 s grace period, preStop sleep included"
    assert ended == ["refused after SIGTERM"] * clients
    assert sum(answered) > before, "requests sent during the drain are answered too"
