"""Open-loop load at a fixed offered rate (Debian's wrk has no `-R`; this stands in for wrk2).

Requests are scheduled at start + i/rate whether or not earlier ones were answered, and each
latency is measured from its *scheduled* send time, so a stalled server is charged for the
requests that queued behind the stall (no coordinated omission). It runs on uvloop in this
process, which the benchmark pins to the load core, over `connections` keep-alive TLS
connections; a request waits for a free connection, and that wait counts in its latency.
The scheduler sleeps until about 1 ms before a send and then yields in a tight loop, since event
loop timers have millisecond resolution; `late_p99_us` reports how late sends still went out.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass

import uvloop

from bench.procs import HOST

Latencies = list[float]


@dataclass(frozen=True)
class RateResult:
    rate: float  # offered, requests per second
    sent: int
    errors: int
    achieved: float  # answered per second
    p50_us: float
    p99_us: float
    p999_us: float
    max_us: float
    late_p99_us: float  # how late the client itself sent (its own share of the latency)


def request_bytes(path: str, body: bytes, port: int) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def run_rate(
    port: int,
    context: ssl.SSLContext,
    request: bytes,
    rate: float,
    seconds: float,
    connections: int,
) -> RateResult:
    return uvloop.run(_run(port, context, request, rate, seconds, connections))


async def _run(
    port: int,
    context: ssl.SSLContext,
    request: bytes,
    rate: float,
    seconds: float,
    connections: int,
) -> RateResult:
    streams = [await asyncio.open_connection(HOST, port, ssl=context) for _ in range(connections)]
    queue: asyncio.Queue[float | None] = asyncio.Queue()
    latencies: Latencies = []
    late: Latencies = []
    errors = [0]
    workers = [
        asyncio.create_task(_worker(r, w, request, queue, latencies, late, errors))
        for r, w in streams
    ]
    total = int(rate * seconds)
    start = time.perf_counter() + 0.05
    try:
        await asyncio.wait_for(_schedule(queue, start, rate, total), seconds + 5)
        for _ in workers:
            queue.put_nowait(None)
        await asyncio.wait_for(asyncio.gather(*workers), 30)
    finally:
        for task in workers:
            task.cancel()
        for _, writer in streams:
            writer.close()
    elapsed = time.perf_counter() - start
    return RateResult(
        rate=rate,
        sent=total,
        errors=errors[0],
        achieved=len(latencies) / elapsed,
        p50_us=percentile(latencies, 50) * 1e6,
        p99_us=percentile(latencies, 99) * 1e6,
        p999_us=percentile(latencies, 99.9) * 1e6,
        max_us=max(latencies, default=float("nan")) * 1e6,
        late_p99_us=percentile(late, 99) * 1e6,
    )


async def _schedule(
    queue: asyncio.Queue[float | None], start: float, rate: float, total: int
) -> None:
    sent = 0
    while sent < total:
        now = time.perf_counter()
        while sent < total and start + sent / rate <= now:
            queue.put_nowait(start + sent / rate)
            sent += 1
        wait = start + sent / rate - time.perf_counter()
        await asyncio.sleep(wait - 0.001 if wait > 0.002 else 0)


async def _worker(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    request: bytes,
    queue: asyncio.Queue[float | None],
    latencies: Latencies,
    late: Latencies,
    errors: list[int],
) -> None:
    while (due := await queue.get()) is not None:
        late.append(max(0.0, time.perf_counter() - due))
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        await _read_body(reader, head)
        latencies.append(time.perf_counter() - due)
        if not head.startswith(b"HTTP/1.1 200"):
            errors[0] += 1


async def _read_body(reader: asyncio.StreamReader, head: bytes) -> None:
    """Content-Length or chunked (what uvicorn sends when the app gives no length)."""
    headers = dict(
        (name.strip().lower(), value.strip())
        for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
    )
    if b"content-length" in headers:
        await reader.readexactly(int(headers[b"content-length"]))
        return
    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
        await reader.readexactly(size + 2)
    await reader.readuntil(b"\r\n")
