"""SIGTERM while clients send: whatever is answered is a complete 200, then exit 0 in time.

The chart gives the Pod terminationGracePeriodSeconds 30 and the server a 20 s graceful timeout.
A request may go unanswered when the server closes an idle keep-alive connection just as the
client sends on it (HTTP/1.1 has no way to avoid that); such requests are counted and reported,
never answered with a partial or broken response. A review in flight at the signal (half of it
sent before SIGTERM, the rest after) must still be answered in full.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from pathlib import Path

import orjson
import pytest

from tests.robustness.conftest import (
    SOAK_SECONDS,
    TPU,
    ClosedBeforeResponse,
    Connection,
    TruncatedResponse,
    assert_admission_review,
    multi_host_job,
    read_reply,
    request_bytes,
    review,
    run_async,
    single_host_pod,
    write_figures,
)
from tests.support.webhook_process import WebhookProcess, make_certs

pytestmark = pytest.mark.slow

CLIENTS = 16
GRACE_PERIOD_SECONDS = 30
LOAD_BEFORE_SIGNAL_SECONDS = min(10.0, max(3.0, SOAK_SECONDS / 4))


def heavy_review() -> bytes:
    """A TPU Pod with many containers: answering it takes a noticeable fraction of a second."""
    pod = single_host_pod()
    one = {"name": "c", "image": "i", "resources": {"limits": {TPU: "8"}}}
    pod["spec"]["containers"] = [dict(one, name=f"c{i}") for i in range(800)]
    return orjson.dumps(review(pod, uid="heavy"))


class Outcomes:
    def __init__(self) -> None:
        self.answered = 0
        self.answered_after_signal = 0
        self.unanswered = 0
        self.refused = 0
        self.broken: list[str] = []
        self.signalled_at: float | None = None


async def client(number: int, server: WebhookProcess, outcomes: Outcomes) -> None:
    n = 0
    while True:
        try:
            connection = await Connection.open(server.port, server.ssl_context(), timeout=5)
        except (OSError, TimeoutError):
            outcomes.refused += 1
            if outcomes.signalled_at is not None:
                return
            await asyncio.sleep(0.05)
            continue
        try:
            while True:
                n += 1
                uid = f"c{number}-{n}"
                obj, kind, group = (
                    (multi_host_job(), "Job", "batch") if n % 2 else (single_host_pod(), "Pod", "")
                )
                body = orjson.dumps(review(obj, kind, group, uid=uid))
                try:
                    reply = await connection.post("/mutate", body, timeout=25)
                except ClosedBeforeResponse:
                    outcomes.unanswered += 1
                    break
                except (TruncatedResponse, TimeoutError, OSError) as error:
                    outcomes.broken.append(f"{uid}: {error!r}")
                    break
                try:
                    assert reply.status == 200, reply.status
                    assert_admission_review(reply.body, uid)
                except (AssertionError, ValueError, KeyError) as error:
                    outcomes.broken.append(f"{uid}: {error!r} {reply.body[:200]!r}")
                    break
                outcomes.answered += 1
                if outcomes.signalled_at is not None:
                    outcomes.answered_after_signal += 1
                if reply.headers.get("connection") == "close":
                    break
        finally:
            await connection.close()


def connect_refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


@pytest.mark.timeout(60 + SOAK_SECONDS)
def test_sigterm_under_load_answers_fully_refuses_new_connections_and_exits_0(
    tmp_path: Path,
) -> None:
    make_certs(tmp_path)
    server = WebhookProcess(tmp_path).start()
    assert server.process is not None
    process = server.process
    outcomes = Outcomes()
    probes: list[bool] = []
    refused_from_now_on = asyncio.Event()
    in_flight: dict[str, object] = {}

    async def send_half_a_review_then_signal() -> None:
        """A review whose second half arrives after SIGTERM: it is in flight at the signal."""
        connection = await Connection.open(server.port, server.ssl_context())
        data = request_bytes("/mutate", heavy_review())
        try:
            connection.writer.write(data[: len(data) // 2])
            await connection.writer.drain()
            await connection.sent_and_read()  # the server has the headers: a request in flight
            outcomes.signalled_at = time.monotonic()
            os.kill(process.pid, signal.SIGTERM)
            await refused_from_now_on.wait()  # the server is shutting down
            connection.writer.write(data[len(data) // 2 :])
            await connection.writer.drain()
            reply = await asyncio.wait_for(read_reply(connection.reader, time.perf_counter()), 25)
            in_flight["status"] = reply.status
            in_flight["uid"] = assert_admission_review(reply.body, "heavy")["response"]["uid"]
        except (OSError, TimeoutError, AssertionError, ValueError) as error:
            in_flight["error"] = repr(error)
        finally:
            await connection.close()

    async def probe_new_connections() -> None:
        """The first refused connection after the signal, then ten more: refused for good."""
        while outcomes.signalled_at is None:
            await asyncio.sleep(0.01)
        while not await asyncio.to_thread(connect_refused, server.port):
            await asyncio.sleep(0.01)
        refused_from_now_on.set()
        for _ in range(10):
            probes.append(await asyncio.to_thread(connect_refused, server.port))

    async def run() -> None:
        clients = [asyncio.ensure_future(client(i, server, outcomes)) for i in range(CLIENTS)]
        started = time.monotonic()
        while outcomes.answered < 10 * CLIENTS:  # every client under way (or nearly)
            assert time.monotonic() - started < 30, "no load before the signal"
            await asyncio.sleep(0.01)
        await asyncio.sleep(LOAD_BEFORE_SIGNAL_SECONDS)  # how long the load runs: the profile
        await asyncio.gather(send_half_a_review_then_signal(), probe_new_connections())
        await asyncio.wait_for(asyncio.gather(*clients), GRACE_PERIOD_SECONDS)

    try:
        run_async(run())
        code = process.wait(GRACE_PERIOD_SECONDS)
        assert outcomes.signalled_at is not None
        exit_seconds = time.monotonic() - outcomes.signalled_at
    finally:
        server.stop()
    figures = {
        "answered": outcomes.answered,
        "answered_after_signal": outcomes.answered_after_signal,
        "unanswered_on_closed_keep_alive": outcomes.unanswered,
        "refused_connects": outcomes.refused,
        "broken": len(outcomes.broken),
        "exit_code": code,
        "exit_seconds_after_sigterm": round(exit_seconds, 2),
        "review_in_flight_at_sigterm": in_flight,
    }
    write_figures(tmp_path / "shutdown-figures.json", "shutdown", figures)
    assert outcomes.broken == []
    assert in_flight == {"status": 200, "uid": "heavy"}, "the review in flight is answered"
    assert len(probes) == 10
    assert all(probes), "once refused after SIGTERM, new connections stay refused"
    assert code == 0
    assert exit_seconds < GRACE_PERIOD_SECONDS - 5
    assert outcomes.answered > 100
    assert "Traceback" not in server.logs()
