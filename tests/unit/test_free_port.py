"""dev.processes.free_port: the ports the tests' servers listen on are never in the range the
kernel hands to outgoing connections, never one that is listening, never the same twice."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from dev import processes
from dev.processes import free_port


def test_ports_are_outside_the_ephemeral_range_and_distinct() -> None:
    low, high = processes._ephemeral_range()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert [p for p in ports if low <= p <= high] == []
    assert all(processes._LOWEST_PICK <= p < 65536 for p in ports)


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_port_something_listens_on_is_passed_over(
    listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "_ephemeral_range", lambda: (60000, 60999))
    picks = iter([listener, listener, 12345])
    monkeypatch.setattr(processes, "_random_pick", lambda _spans: next(picks))
    monkeypatch.setattr(processes, "_handed_out", set())
    assert free_port() == 12345


def test_a_port_handed_out_before_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "_ephemeral_range", lambda: (60000, 60999))
    picks = iter([23456, 23456, 23457])
    monkeypatch.setattr(processes, "_random_pick", lambda _spans: next(picks))
    monkeypatch.setattr(processes, "_handed_out", set())
    assert [free_port(), free_port()] == [23456, 23457]


def test_the_kernel_picks_when_the_ephemeral_range_leaves_nothing_outside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "_ephemeral_range", lambda: (1024, 65535))
    monkeypatch.setattr(processes, "_handed_out", set())
    ports = [free_port() for _ in range(5)]
    assert len(set(ports)) == 5
    assert all(1024 <= p <= 65535 for p in ports)


def test_the_range_is_read_from_the_kernel() -> None:
    low, high = (int(x) for x in processes._EPHEMERAL_RANGE.read_text().split())
    assert processes._ephemeral_range() == (low, high)


def test_the_draw_covers_every_span_and_nothing_else() -> None:
    spans = [range(10, 13), range(20, 22)]
    drawn = {processes._random_pick(spans) for _ in range(500)}
    assert drawn == {10, 11, 12, 20, 21}
