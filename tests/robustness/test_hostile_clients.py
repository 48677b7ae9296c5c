"""Hostile clients against a real server: memory stays well under the chart's limit, every health
probe is answered, and the API server's reviews still are (bench/hostile.py runs the same mixes
and prints their figures; bench/RESULTS.md has a run).

Each mix runs against a fresh `python -m webhook serve` over TLS on 127.0.0.1 while its VmRSS is
sampled every 20 ms and /healthz is probed every 100 ms with the chart's liveness timeout (3 s).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bench.hostile import CHART_MEMORY_LIMIT_MIB, MixResult, post_head, run_mix
from bench.worst import SHAPES
from tests.robustness.conftest import run_async, write_figures
from tests.support.webhook_process import WebhookProcess, make_certs

HEADROOM = 0.75  # a mix may use at most this share of the chart's memory limit
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("hostile-certs")
    make_certs(directory)
    return directory


def mix(name: str, certs: Path, tmp_path: Path) -> MixResult:
    result: MixResult = run_async(run_mix(name, certs))
    figures = {"row": result.row(), **result.figures}
    write_figures(tmp_path / f"hostile-{name}-figures.json", f"hostile-{name}", figures)
    assert result.watch.probe_failures == []
    assert result.watch.probes  # probed throughout
    assert max(result.watch.probes) < 3.0  # the liveness probe's timeout
    assert result.watch.peak_mib < HEADROOM * CHART_MEMORY_LIMIT_MIB
    return result


def test_huge_request_heads_are_refused_at_the_cap_without_memory(
    certs: Path, tmp_path: Path
) -> None:
    result = mix("heads", certs, tmp_path)
    assert result.figures["statuses"] == ["431"]
    assert result.watch.growth_mib < 16


def test_five_thousand_idle_connections_keep_a_thousand_open(certs: Path, tmp_path: Path) -> None:
    result = mix("idle", certs, tmp_path)
    assert result.figures["opened"] == 5000
    assert result.figures["still open"] <= 1000


def test_thirty_two_clients_of_maximum_size_reviews_are_all_answered(
    certs: Path, tmp_path: Path
) -> None:
    result = mix("large", certs, tmp_path)
    answers = result.figures["answers"]
    assert answers.endswith("x 200")
    assert "," not in answers  # every answer a 200


def test_reviews_whose_clients_went_away_are_not_decided(certs: Path, tmp_path: Path) -> None:
    result = mix("abandoned", certs, tmp_path)
    assert result.figures["next review"].startswith("200 in ")
    # 16 sent: those abandoned while waiting for their turn are never decided (the review that
    # follows is the one "allowed"; at most the two holding a place were decided: "denied")
    outcomes = result.figures["reviews"]
    assert outcomes.get("denied", 0) <= 2, outcomes
    assert outcomes.get("allowed", 0) == 1, outcomes


# ---- the protocol's caps, one by one --------------------------------------------------------


@pytest.fixture
def small_server(certs: Path) -> Iterator[WebhookProcess]:
    with WebhookProcess(
        certs, env={"TPU_WEBHOOK_MAX_CONNECTIONS": "16", "TPU_WEBHOOK_MAX_HEAD_BYTES": "4096"}
    ) as server:
        yield server


def small_review() -> bytes:
    return orjson.dumps(SHAPES["long-topology"](1))


async def _connect(server: WebhookProcess) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(
        "127.0.0.1", server.port, ssl=server.ssl_context(), server_hostname="127.0.0.1"
    )


async def _status(reader: asyncio.StreamReader) -> int:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = int(head.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
    await reader.readexactly(length)
    return int(head.split(b" ", 2)[1])


async def _closed(reader: asyncio.StreamReader, wait: float = 2.0) -> bool:
    """Whether the server closed the connection (within `wait` seconds; it sends nothing)."""
    try:
        return await asyncio.wait_for(reader.read(1), wait) == b""
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


def test_a_head_just_under_the_cap_is_answered_and_one_over_it_is_refused(
    small_server: WebhookProcess,
) -> None:
    body = small_review()

    async def main() -> tuple[int, int, bool]:
        reader, writer = await _connect(small_server)
        padding = b"X-Pad: " + b"a" * (4096 - 300) + b"\r\n"
        writer.write(post_head(len(body)).replace(b"\r\n\r\n", b"\r\n" + padding + b"\r\n") + body)
        under = await _status(reader)
        writer.close()
        reader, writer = await _connect(small_server)
        writer.write(post_head(len(body)).replace(b"\r\n\r\n", b"\r\n" + padding * 2 + b"\r\n"))
        over = await _status(reader)
        return under, over, await _closed(reader)

    assert run_async(main()) == (200, 431, True)


def test_above_the_connection_cap_the_connection_idle_longest_is_closed(
    small_server: WebhookProcess,
) -> None:
    body = small_review()
    request = post_head(len(body)) + body

    async def main() -> tuple[list[bool], int]:
        opened = []
        for _ in range(16):
            reader, writer = await _connect(small_server)
            writer.write(request)
            assert await _status(reader) == 200
            opened.append((reader, writer))
            await asyncio.sleep(0.01)  # each idle since a later time than the one before
        reader, writer = await _connect(small_server)  # the 17th
        writer.write(request)
        status = await _status(reader)
        closed = [await _closed(r) for r, _ in opened[:2]]
        return closed, status

    assert run_async(main()) == ([True, False], 200)


def test_when_every_connection_is_busy_a_new_one_is_closed(small_server: WebhookProcess) -> None:
    async def main() -> bool:
        busy = []
        for _ in range(16):
            reader, writer = await _connect(small_server)
            writer.write(b"POST /validate HTTP/1.1\r\nHost: x\r\n")  # a head under way
            busy.append((reader, writer))
        reader, _ = await _connect(small_server)
        return await _closed(reader)

    assert run_async(main()) is True
