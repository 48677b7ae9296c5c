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

from tests.support.webhook_process import WebhookProcess, free_port, make_certs

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


def test_sigterm_finishes_requests_in_flight_and_exits(tmp_path: Path) -> None:
    make_certs(tmp_path)
    server = WebhookProcess(tmp_path).start()
    answered: list[int] = []
    errors: list[str] = []

    def client() -> None:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", server.port, context=server.ssl_context()
        )
        try:
            for _ in range(200):
                connection.request(
                    "POST", "/validate", REVIEW, {"Content-Type": "application/json"}
                )
                response = connection.getresponse()
                response.read()
                answered.append(response.status)
        except (OSError, http.client.HTTPException) as error:
            errors.append(type(error).__name__)
        finally:
            connection.close()

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    assert server.process is not None
    started = time.monotonic()
    os.kill(server.process.pid, signal.SIGTERM)
    code = server.process.wait(30)
    elapsed = time.monotonic() - started
    for thread in threads:
        thread.join(10)
    assert code == 0
    assert elapsed < 25
    assert set(answered) == {200}
    # connections are closed between requests after SIGTERM: at most a refused reconnect
    assert set(errors) <= {
        "RemoteDisconnected",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "BadStatusLine",
    }


def test_several_workers_share_the_port_and_stop_together(tmp_path: Path) -> None:
    make_certs(tmp_path)
    server = WebhookProcess(tmp_path, ["--workers", "2"]).start()
    assert server.process is not None
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    workers = children.read_text().split()
    try:
        assert len(workers) == 2
        for _ in range(20):
            connection = http.client.HTTPSConnection(
                "127.0.0.1", server.port, context=server.ssl_context()
            )
            connection.request("POST", "/validate", REVIEW, {"Content-Type": "application/json"})
            assert connection.getresponse().status == 200
            connection.close()
    finally:
        code = server.stop()
    assert code == 0
    assert all(not Path(f"/proc/{pid}").exists() for pid in workers)
