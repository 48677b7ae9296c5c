"""The processes of dev/: started in a group of their own that dies with the test process,
waited for while checking they still run, and always stopped and reaped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

STOP_TIMEOUT_S = 15.0
_PR_SET_PDEATHSIG = 1


class CommandError(subprocess.CalledProcessError):
    """A kubectl/helm call failed; unlike CalledProcessError, str() shows stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


class Started:
    """`with Thing() as thing:` starts it and always stops it, also when the body fails."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> object:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def child_setup() -> None:  # pragma: no cover - runs in the forked child
    """New process group, and SIGKILL when the parent (the test process) dies."""
    os.setpgid(0, 0)
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# The kernel gives every outgoing connection a local port from net.ipv4.ip_local_port_range
# (32768-60999 by default). A listening port picked there can be taken by any connect() between
# the pick and the server's bind; CI saw it once (the API server's and the operators' clients
# took the webhook's port: "Address already in use"). So ports are picked outside that range.
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PICK = 10_000  # below: well-known and registered services a machine may run
_PICK_ATTEMPTS = 200
_handed_out: set[int] = set()  # never the same port twice from one process


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(part) for part in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))  # no SO_REUSEADDR: a port in TIME_WAIT is not taken
        except OSError:
            return False
        return True


def _random_pick(spans: list[range]) -> int:
    """A port drawn uniformly from all of `spans`."""
    k = random.randrange(sum(len(span) for span in spans))
    for span in spans:
        if k < len(span):
            return span[k]
        k -= len(span)
    raise AssertionError("unreachable: k < the spans' total length")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on just now, that this process has not
    handed out before, and that no outgoing connection can take before the server binds it
    (outside the ephemeral range; the kernel's own pick inside it only if nothing outside is
    free)."""
    low, high = _ephemeral_range()
    outside = [r for r in (range(_LOWEST_PICK, low), range(high + 1, 65536)) if len(r) > 0]
    for _ in range(_PICK_ATTEMPTS if outside else 0):
        port = _random_pick(outside)
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    for _ in range(_PICK_ATTEMPTS):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            chosen: int = s.getsockname()[1]
        if chosen not in _handed_out:
            break
    _handed_out.add(chosen)
    return chosen


def stop_process(
    proc: subprocess.Popen[Any],
    timeout: float = STOP_TIMEOUT_S,
    first: signal.Signals = signal.SIGTERM,
) -> int | None:
    """`first` to the process group (the process was started in a session of its own), SIGKILL
    to the group after ``timeout``; always reap. The exit status (None if it never ended)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, first)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    # The leader may be gone while group members linger: kill the group regardless.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout)
    return proc.returncode


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status) == 200
    except urllib.error.HTTPError:
        return False


def check_alive(
    procs: Iterable[tuple[str, subprocess.Popen[bytes], Path]],
    error: type[Exception],
    lines: int = 30,
) -> None:
    """Raise `error`, with the tail of its log, for the first of (name, process, log) that
    has exited."""
    for name, proc, log in procs:
        if proc.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
            raise error(f"{name} exited with {proc.returncode}; log tail:\n{tail}")


def wait_until(
    what: str,
    deadline: float,
    probe: Callable[[], Any],
    alive: Callable[[], None],
    error: type[Exception],
    expected: tuple[type[Exception], ...] = (OSError, urllib.error.URLError, ValueError),
) -> Any:
    """`probe()`'s first true value before `deadline`, checking `alive()` in between; an
    `expected` error counts as "not yet"."""
    last: object = None
    while time.monotonic() < deadline:
        alive()
        try:
            value = probe()
        except expected as exc:
            last, value = exc, None
        if value:
            return value
        time.sleep(0.2)
    raise error(f"timed out waiting for {what} (last error: {last!r})")
