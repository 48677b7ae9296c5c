"""Hostile clients against a real `tpu-webhook serve`, with the server's memory and its health
probes watched throughout.

    .venv/bin/python -m bench.hostile              # every mix, the figures as a Markdown table
    .venv/bin/python -m bench.hostile heads idle   # some of them

Mixes (each against a fresh server with its default settings, over TLS on 127.0.0.1):
- heads: 4 connections each sending a 48 MiB request head;
- idle: 5,000 keep-alive connections, each after one review, held open;
- large: 32 connections each posting the worst 3 MiB review found (bench.worst) again and again;
- abandoned: 16 connections that send a 3 MiB review and go away at once.
Meanwhile a prober GETs /healthz every 100 ms (the chart's liveness probe: 3 s timeout) and the
server's VmRSS is sampled every 20 ms. tests/robustness/test_hostile_clients.py runs the same mixes
and bounds their figures; bench/RESULTS.md has a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.worst import SHAPES, grow
from tests.support.webhook_process import WebhookProcess, make_certs

MiB = 1024 * 1024
CHART_MEMORY_LIMIT_MIB = 256  # charts/tpu-webhook: the memory limit of the server container
PROBE_EVERY = 0.1
PROBE_TIMEOUT = 3.0  # the chart's livenessProbe.timeoutSeconds
WORST_SHAPE = "containers-wrong-chips"  # the most expensive review of bench.worst


@dataclass
class Watch:
    """What the server did while a mix ran: its memory and its answers to health probes."""

    pid: int
    baseline_kib: int = 0
    peak_kib: int = 0
    probes: list[float] = field(default_factory=list)  # seconds to each answer
    probe_failures: list[str] = field(default_factory=list)

    @property
    def peak_mib(self) -> float:
        return self.peak_kib / 1024

    @property
    def growth_mib(self) -> float:
        return (self.peak_kib - self.baseline_kib) / 1024


@dataclass
class MixResult:
    mix: str
    what: str
    watch: Watch
    figures: dict[str, Any]

    def row(self) -> str:
        probes = sorted(self.watch.probes)
        worst = f"{probes[-1] * 1000:.0f} ms" if probes else "-"
        answered = f"{len(probes)}/{len(probes) + len(self.watch.probe_failures)}"
        return (
            f"| {self.mix} | {self.what} | {self.watch.baseline_kib / 1024:.0f} MiB | "
            f"{self.watch.peak_mib:.0f} MiB ({self.watch.peak_mib / CHART_MEMORY_LIMIT_MIB:.0%} "
            f"of the limit) | {answered}, slowest {worst} | "
            + ", ".join(f"{k} {v}" for k, v in self.figures.items())
            + " |"
        )


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


async def _sample(watch: Watch, stop: asyncio.Event) -> None:
    while not stop.is_set():
        watch.peak_kib = max(watch.peak_kib, rss_kib(watch.pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.02)


async def _probe(port: int, context: ssl.SSLContext, watch: Watch, stop: asyncio.Event) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        try:
            await asyncio.wait_for(_get_healthz(port, context), PROBE_TIMEOUT)
            watch.probes.append(time.perf_counter() - started)
        except (OSError, ssl.SSLError, TimeoutError, asyncio.IncompleteReadError) as error:
            watch.probe_failures.append(repr(error))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), PROBE_EVERY)


async def _get_healthz(port: int, context: ssl.SSLContext) -> None:
    """One probe on a new connection, as the kubelet makes it."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
    )
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
        status = await reader.readline()
        if b" 200 " not in status:
            raise OSError(f"healthz answered {status!r}")
        await reader.read()
    finally:
        writer.close()


async def watched(
    server: WebhookProcess, mix: Callable[[int, ssl.SSLContext], Awaitable[dict[str, Any]]]
) -> tuple[Watch, dict[str, Any]]:
    """Run `mix` against the server while probing it and sampling its memory."""
    assert server.process is not None
    watch = Watch(server.process.pid)
    await asyncio.sleep(0.5)  # settled after start-up
    watch.baseline_kib = watch.peak_kib = rss_kib(watch.pid)
    stop = asyncio.Event()
    context = server.ssl_context()
    helpers = [
        asyncio.create_task(_sample(watch, stop)),
        asyncio.create_task(_probe(server.port, context, watch, stop)),
    ]
    try:
        figures = await mix(server.port, context)
    finally:
        stop.set()
        await asyncio.gather(*helpers)
    return watch, figures


def review_body(shape: str = WORST_SHAPE) -> bytes:
    return grow(SHAPES[shape])[0]


def post_head(body_size: int, path: str = "/validate") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {body_size}\r\n\r\n"
    ).encode()


async def _status(reader: asyncio.StreamReader) -> int:
    """The status of one response, its body read (Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(lines[0].split()[1])


async def huge_heads(
    port: int, context: ssl.SSLContext, connections: int = 4, size: int = 48 * MiB
) -> dict[str, Any]:
    """Each connection sends a request head of `size` bytes (one endless header), 64 KiB at a
    time, until the server answers or closes."""

    async def one() -> tuple[int, int | None]:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
        )
        sent, status = 0, None
        chunk = b"a" * (64 * 1024)
        try:
            writer.write(b"POST /validate HTTP/1.1\r\nHost: x\r\nX-Big: ")
            while sent < size:
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)
        except (ConnectionError, ssl.SSLError):
            pass
        with contextlib.suppress(
            ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, TimeoutError
        ):
            status = await asyncio.wait_for(_status(reader), 5)
        writer.close()
        return sent, status

    results = await asyncio.gather(*(one() for _ in range(connections)))
    return {
        "statuses": sorted({str(s) for _, s in results}),
        "most sent before the close": f"{max(s for s, _ in results) / MiB:.1f} MiB",
    }


async def idle_connections(port: int, context: ssl.SSLContext, count: int = 5000) -> dict[str, Any]:
    """`count` keep-alive connections, each after one small review, then held open; how many
    the server still keeps once all were made."""
    body = orjson.dumps(PLAIN_POD)
    opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    refused = 0
    for _ in range(count):
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
            )
            writer.write(post_head(len(body)) + body)
            await _status(reader)
            opened.append((reader, writer))
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            refused += 1
    await asyncio.sleep(0.5)
    alive = 0
    for reader, _writer in opened:
        if not reader.at_eof():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.read(1), 0.001)
        alive += not reader.at_eof()
    for _, writer in opened:
        writer.close()
    return {"opened": len(opened), "refused": refused, "still open": alive}


async def large_reviews(
    port: int, context: ssl.SSLContext, clients: int = 32, seconds: float = 8.0
) -> dict[str, Any]:
    """`clients` keep-alive connections, each posting the worst 3 MiB review again and again."""
    body = review_body()
    request = post_head(len(body)) + body
    statuses: dict[int, int] = {}
    slowest = 0.0
    deadline = time.monotonic() + seconds

    async def client() -> None:
        nonlocal slowest
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1", limit=1 << 22
        )
        try:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                writer.write(request)
                status = await asyncio.wait_for(_status(reader), 30)
                slowest = max(slowest, time.perf_counter() - started)
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            writer.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return {
        "answers": ", ".join(f"{n} x {s}" for s, n in sorted(statuses.items())),
        "slowest answer": f"{slowest:.1f} s",
    }


async def abandoned_reviews(
    port: int, context: ssl.SSLContext, clients: int = 16
) -> dict[str, Any]:
    """`clients` connections that each send a 3 MiB review and close at once, as an API server
    does when its timeout passes; then one review, which must be answered."""
    body = review_body()
    writers = []
    for _ in range(clients):  # connected first, so that all of them send at once
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
        )
        writers.append(writer)
    for writer in writers:
        writer.write(post_head(len(body)) + body)
    await asyncio.sleep(0.05)
    for writer in writers:
        writer.transport.abort()
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
    )
    small = orjson.dumps(PLAIN_POD)
    started = time.perf_counter()
    writer.write(post_head(len(small)) + small)
    status = await asyncio.wait_for(_status(reader), 30)
    writer.close()
    return {"next review": f"{status} in {time.perf_counter() - started:.2f} s"}


# A review of a Pod with no TPU: allowed.
PLAIN_POD = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "plain",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "object": {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "c"}]}},
    },
}


MIXES: dict[str, tuple[str, Callable[[int, ssl.SSLContext], Awaitable[dict[str, Any]]]]] = {
    "heads": ("4 connections, a 48 MiB request head each", huge_heads),
    "idle": ("5,000 idle keep-alive TLS connections", idle_connections),
    "large": ("32 connections posting 3 MiB worst-case reviews for 8 s", large_reviews),
    "abandoned": ("16 3 MiB reviews whose clients go away at once", abandoned_reviews),
}


async def run_mix(name: str, certs: Path, env: dict[str, str] | None = None) -> MixResult:
    what, mix = MIXES[name]
    server = WebhookProcess(certs, env=env or {}).start()
    try:
        watch, figures = await watched(server, mix)
        figures["reviews"] = _outcomes(server)
    finally:
        server.stop()
    return MixResult(name, what, watch, figures)


def _outcomes(server: WebhookProcess) -> dict[str, int]:
    """Reviews by outcome, from /metrics (`invalid`: malformed or abandoned before decided)."""
    import urllib.request

    with urllib.request.urlopen(
        f"{server.url}/metrics", context=server.ssl_context(), timeout=5
    ) as response:
        text = response.read().decode()
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("tpu_webhook_requests_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = counts.get(outcome, 0) + int(float(line.rsplit(" ", 1)[1]))
    return counts


def main(argv: list[str]) -> int:
    import uvloop

    names = argv or list(MIXES)
    print("| mix | what | RSS before | peak RSS | /healthz answered | figures |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="tpu-webhook-hostile-") as work:
        certs = Path(work)
        make_certs(certs)
        for name in names:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                result = runner.run(run_mix(name, certs))
            print(result.row(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
