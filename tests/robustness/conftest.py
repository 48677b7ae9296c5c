"""Shared pieces of the robustness tests: review builders, a lean async HTTPS client, figures.

Profiles: the CI profile is the default. `TPU_WEBHOOK_SOAK_SECONDS` lengthens the load, rotation
and shutdown runs, and `TPU_WEBHOOK_PROPERTY_EXAMPLES` the hypothesis runs (see README.md).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import ssl
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from tests.support.webhook_process import WebhookProcess, make_certs
from webhook.serving.app import create_app
from webhook.settings import Settings

SOAK_SECONDS = float(os.environ.get("TPU_WEBHOOK_SOAK_SECONDS", "20"))
PROPERTY_EXAMPLES = int(os.environ.get("TPU_WEBHOOK_PROPERTY_EXAMPLES", "150"))
UID = "3f2c6a0e-robustness"
ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY = "cloud.google.com/gke-tpu-topology"
TPU = "google.com/tpu"
TRACEBACK_MARKERS = ("Traceback", 'File "', '.py", line', "site-packages")


# ---- objects and reviews ------------------------------------------------------------------


def review(
    obj: Any,
    kind: str = "Pod",
    group: str = "",
    *,
    uid: str = UID,
    operation: str = "CREATE",
    api_version: str = "admission.k8s.io/v1",
    **request: Any,
) -> dict[str, Any]:
    """An AdmissionReview as the API server sends it."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name", "") if isinstance(meta, dict) else ""
    body: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
        "operation": operation,
        "namespace": "team-a",
        "name": name if isinstance(name, str) else "",
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
    }
    body.update(request)
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": body}


def single_host_pod(chips: object = "8", **container: Any) -> dict[str, Any]:
    """A v5e 2x4 one-host Pod that only sets limits: mutation adds requests and ports."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "infer", "namespace": "team-a"},
        "spec": {
            "nodeSelector": {ACCELERATOR: "tpu-v5-lite-podslice", TOPOLOGY: "2x4"},
            "containers": [
                {
                    "name": "main",
                    "image": "server",
                    "resources": {"limits": {TPU: chips}},
                    **container,
                }
            ],
        },
    }


def multi_host_job(name: str = "train", **template_spec: Any) -> dict[str, Any]:
    """A correct v4 2x2x4 Indexed Job of 4 hosts: mutation adds env, ports and a subdomain."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {ACCELERATOR: "tpu-v4-podslice", TOPOLOGY: "2x2x4"},
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer",
                            "resources": {"requests": {TPU: 4, "cpu": "10"}, "limits": {TPU: 4}},
                        }
                    ],
                    **template_spec,
                }
            },
        },
    }


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    patch = response["response"].get("patch")
    if patch is None:
        return []
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(patch))
    return ops


def assert_clean_error_body(status: int, body: bytes) -> None:
    """4xx/5xx bodies are one short JSON error, never a traceback."""
    text = body.decode("utf-8", "replace")
    assert not any(marker in text for marker in TRACEBACK_MARKERS), text[:500]
    if status != 200:
        parsed = json.loads(body)
        assert isinstance(parsed, dict)
        assert isinstance(parsed.get("error", parsed.get("detail")), str), parsed
        assert len(body) < 1024, f"error body of {len(body)} bytes"


def assert_admission_review(body: bytes, uid: str = UID) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(body)
    assert parsed["kind"] == "AdmissionReview"
    assert parsed["response"]["uid"] == uid
    assert isinstance(parsed["response"]["allowed"], bool)
    return parsed


@pytest.fixture(scope="module")
def app_client() -> Iterator[TestClient]:
    """The app with the production body cap (3 MiB); exceptions become 500s as in production."""
    app = create_app(Settings())
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


# ---- real servers ---------------------------------------------------------------------------


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    directory.mkdir()
    make_certs(directory, client=True)
    return directory


@pytest.fixture
def server(certs: Path) -> Iterator[WebhookProcess]:
    """A real `python -m webhook serve` with a 64 KiB body cap."""
    process = WebhookProcess(certs, ["--max-body-bytes", "65536"])
    with process:
        yield process


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def server_pid(server: WebhookProcess) -> int:
    assert server.process is not None
    return server.process.pid


# ---- a lean HTTP/1.1 keep-alive client over asyncio TLS ---------------------------------------


class ClosedBeforeResponse(ConnectionError):
    """The server closed the connection before sending a single byte of a response."""


class TruncatedResponse(ConnectionError):
    """The server sent part of a response and then closed the connection."""


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float


def request_bytes(
    path: str, body: bytes, method: str = "POST", close: bool = False, host: str = "127.0.0.1"
) -> bytes:
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
    )
    if close:
        head += "Connection: close\r\n"
    return head.encode() + b"\r\n" + body


async def read_reply(reader: asyncio.StreamReader, started: float) -> Reply:
    """One response; ClosedBeforeResponse or TruncatedResponse when the server closes early."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if not error.partial:
            raise ClosedBeforeResponse("closed before the status line") from None
        raise TruncatedResponse(f"headers cut after {len(error.partial)} bytes") from None
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    try:
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = await _read_chunked(reader)
        else:
            body = await reader.read()
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError) as error:
        raise TruncatedResponse(f"body cut: {error!r}") from None
    return Reply(status, headers, body, time.perf_counter() - started)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)


class Connection:
    """One keep-alive HTTPS connection; `post` raises the two errors above on early closes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int, context: ssl.SSLContext, timeout: float = 10.0) -> Connection:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1", limit=1 << 22
            ),
            timeout,
        )
        return cls(reader, writer)

    def peer_serial(self) -> int:
        from cryptography import x509

        der = self.writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return int(x509.load_der_x509_certificate(der).serial_number)

    async def post(self, path: str, body: bytes, timeout: float = 30.0) -> Reply:
        started = time.perf_counter()
        try:
            self.writer.write(request_bytes(path, body))
            await self.writer.drain()
        except (ConnectionError, ssl.SSLError) as error:
            raise ClosedBeforeResponse(f"write failed: {error!r}") from None
        try:
            return await asyncio.wait_for(read_reply(self.reader, started), timeout)
        except (ConnectionResetError, BrokenPipeError) as error:
            raise ClosedBeforeResponse(f"reset: {error!r}") from None

    async def sent_and_read(self, timeout: float = 10.0) -> None:
        """Return once the server process has read every byte written so far (an event the
        kernel reports, not a guess about time)."""
        local = self.writer.get_extra_info("sockname")[1]
        remote = self.writer.get_extra_info("peername")[1]
        deadline = time.monotonic() + timeout
        while not all_bytes_read(local, remote):
            assert time.monotonic() < deadline, "the server did not read what was sent"
            await asyncio.sleep(0.005)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
            await asyncio.wait_for(self.writer.wait_closed(), 2)


def all_bytes_read(client_port: int, server_port: int) -> bool:
    """Whether the loopback TCP connection client_port -> server_port has nothing in flight: the
    client's send queue is acknowledged (tx_queue 0) and the server process has read its
    receive queue (rx_queue 0), as /proc/net/tcp reports both ends."""
    queues: dict[tuple[int, int], tuple[int, int]] = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(a.split(":")[1], 16) for a in fields[1:3])
        tx, rx = (int(q, 16) for q in fields[4].split(":"))
        queues[(local, remote)] = (tx, rx)
    client = queues.get((client_port, server_port))
    server = queues.get((server_port, client_port))
    assert client is not None, "no such connection"
    assert server is not None, "no such connection"
    return client[0] == 0 and server[1] == 0


def run_async(main: Any) -> Any:
    """asyncio.run on uvloop: the client should not be the bottleneck on two cores."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


# ---- figures -----------------------------------------------------------------------------


@dataclass
class Figures:
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    finished: float = 0.0

    def summary(self) -> dict[str, float]:
        values = sorted(self.latencies)
        seconds = (self.finished or time.perf_counter()) - self.started
        return {
            "requests": len(values),
            "errors": len(self.errors),
            "seconds": round(seconds, 2),
            "requests_per_second": round(len(values) / seconds, 1) if seconds else 0.0,
            "p50_ms": round(percentile(values, 50) * 1000, 3),
            "p99_ms": round(percentile(values, 99) * 1000, 3),
            "p99_9_ms": round(percentile(values, 99.9) * 1000, 3),
            "max_ms": round((values[-1] if values else 0.0) * 1000, 3),
            "mean_ms": round(statistics.fmean(values) * 1000, 3) if values else 0.0,
        }


def percentile(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return 0.0
    rank = min(len(sorted_values) - 1, max(0, round(pct / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


def write_figures(path: Path, name: str, figures: dict[str, Any]) -> None:
    """Print the figures (shown with `pytest -s`) and keep them as JSON next to the test."""
    path.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"\n{name}: {orjson.dumps(figures).decode()}\n  written to {path}")  # noqa: T201
