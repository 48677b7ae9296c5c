"""Many keep-alive HTTPS clients against a real server: no error, flat memory, figures.

CI profile: 32 connections for TPU_WEBHOOK_SOAK_SECONDS (default 20 s) after a short warm-up.
Figures (req/s, p50/p99/p99.9 latency, RSS) are printed (`pytest -s`) and written to
`<tmp>/load-figures.json`. Timing is only sanity-checked here; speed goals live in the benchmark.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import orjson
import pytest

from tests.robustness.conftest import (
    SOAK_SECONDS,
    Connection,
    Figures,
    assert_admission_review,
    multi_host_job,
    review,
    rss_kib,
    run_async,
    server_pid,
    single_host_pod,
    write_figures,
)
from tests.support.webhook_process import WebhookProcess

pytestmark = pytest.mark.slow

CONNECTIONS = 32
WARM_UP_SECONDS = min(3.0, SOAK_SECONDS / 5)
# Growth allowed between the mean RSS of the first and the last third of the measured run.
RSS_GROWTH_LIMIT_KIB = 8 * 1024
NON_TPU = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web"},
    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
}
# What an API server sends most: non-TPU Pods, then TPU workloads to patch or to deny.
MIX = [
    ("/mutate", NON_TPU, "Pod", ""),
    ("/validate", NON_TPU, "Pod", ""),
    ("/mutate", single_host_pod(), "Pod", ""),
    ("/validate", single_host_pod(chips="3"), "Pod", ""),
    ("/mutate", multi_host_job(), "Job", "batch"),
    ("/validate", multi_host_job(), "Job", "batch"),
]


def bodies(client: int) -> list[tuple[str, bytes, str]]:
    out = []
    for n, (path, obj, kind, group) in enumerate(MIX):
        uid = f"load-{client}-{n}"
        out.append((path, orjson.dumps(review(obj, kind, group, uid=uid)), uid))
    return out


async def keep_sending(
    client: int, port: int, server: WebhookProcess, until: float, figures: Figures | None
) -> None:
    connection = await Connection.open(port, server.ssl_context())
    mine = bodies(client)
    n = client
    try:
        while time.perf_counter() < until:
            path, body, uid = mine[n % len(mine)]
            n += 1
            try:
                reply = await connection.post(path, body, timeout=10)
                if reply.status != 200:
                    raise AssertionError(f"HTTP {reply.status}: {reply.body[:200]!r}")
                assert_admission_review(reply.body, uid)
            except (OSError, AssertionError, TimeoutError, ValueError) as error:
                if figures is not None:
                    figures.errors.append(f"{path}: {error!r}")
                await connection.close()
                connection = await Connection.open(port, server.ssl_context())
                continue
            if figures is not None:
                figures.latencies.append(reply.seconds)
    finally:
        await connection.close()


async def sample_rss(pid: int, until: float, samples: list[int]) -> None:
    while time.perf_counter() < until:
        samples.append(rss_kib(pid))
        await asyncio.sleep(0.2)


@pytest.mark.timeout(SOAK_SECONDS + 60)
def test_keep_alive_clients_get_no_error_and_memory_stays_flat(
    server: WebhookProcess, tmp_path: Path
) -> None:
    pid = server_pid(server)
    rss_at_start = rss_kib(pid)
    samples: list[int] = []
    figures = Figures()

    async def run() -> None:
        warm_until = time.perf_counter() + WARM_UP_SECONDS
        await asyncio.gather(
            *(keep_sending(i, server.port, server, warm_until, None) for i in range(CONNECTIONS))
        )
        figures.started = time.perf_counter()
        until = figures.started + SOAK_SECONDS
        await asyncio.gather(
            sample_rss(pid, until, samples),
            *(keep_sending(i, server.port, server, until, figures) for i in range(CONNECTIONS)),
        )
        figures.finished = time.perf_counter()

    run_async(run())
    third = max(1, len(samples) // 3)
    first, last = samples[:third], samples[-third:]
    result = {
        "connections": CONNECTIONS,
        "soak_seconds": SOAK_SECONDS,
        **figures.summary(),
        "rss_kib_before_warm_up": rss_at_start,
        "rss_kib_first_third_mean": round(sum(first) / len(first)),
        "rss_kib_last_third_mean": round(sum(last) / len(last)),
        "rss_kib_max": max(samples),
        "rss_samples": len(samples),
    }
    write_figures(tmp_path / "load-figures.json", "load", result)
    assert figures.errors == []
    growth = result["rss_kib_last_third_mean"] - result["rss_kib_first_third_mean"]
    assert growth < RSS_GROWTH_LIMIT_KIB, f"RSS grew {growth} KiB: {samples}"
    # sanity only: a loaded two-core machine is slow, not broken
    assert result["requests_per_second"] > 50
    assert result["p99_ms"] < 2000
    assert server.log is not None
    with server.log.open() as log:  # hundreds of MB in the long profile: stream it
        errors = [json.loads(line) for line in log if '"level":"error"' in line]
    assert errors == []
    server.log.unlink()
