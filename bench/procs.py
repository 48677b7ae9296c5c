"""Server processes pinned to a core, their readiness, CPU time and memory, and their end.

Every process started here is in its own session and is registered in `STARTED`; `stop_all()`
(called on exit, on Ctrl-C and on errors) ends each of them by its own id.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dev.processes import free_port

ROOT = Path(__file__).resolve().parent.parent  # `python -m bench.ceiling` runs from here
HOST = "127.0.0.1"  # the only address the benchmark talks to
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STARTED: list[Server] = []
CHILDREN: list[subprocess.Popen[str]] = []  # load generators running now


@dataclass
class Server:
    """`taskset -c <core> python -m <module> ...` serving HTTPS on 127.0.0.1:<port>."""

    name: str
    module_args: list[str]
    certs: Path
    core: int = 0
    port: int = field(default_factory=free_port)
    root: Path = ROOT  # the working directory: which webhook/ and bench/ `-m` imports
    process: subprocess.Popen[bytes] | None = None
    startup_seconds: float = 0.0
    env: dict[str, str] = field(default_factory=dict)  # beside this process's environment
    # called once the server is ready (before any load): e.g. until it has read the cluster
    after_start: Callable[[Server], None] | None = None
    wrapper: list[str] = field(default_factory=list)  # runs the server: e.g. valgrind and its flags

    @property
    def log(self) -> Path:
        return self.certs / f"{self.name}.log"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 30.0) -> Server:
        args = [a.replace("{port}", str(self.port)) for a in self.module_args]
        command = ["taskset", "-c", str(self.core), *self.wrapper, sys.executable, "-m", *args]
        with self.log.open("wb") as log:
            started = time.perf_counter()
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.root,
                env={**os.environ, **self.env},
            )
        STARTED.append(self)
        self._wait_ready(started, timeout)
        if self.after_start is not None:
            self.after_start(self)
        return self

    def _wait_ready(self, started: float, timeout: float) -> None:
        context = client_context(self.certs)
        while time.perf_counter() - started < timeout:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.tail()}")
            if _ready(self.port, context):
                self.startup_seconds = time.perf_counter() - started
                return
            time.sleep(0.005)
        raise RuntimeError(f"{self.name} not ready after {timeout}s:\n{self.tail()}")

    def tail(self, size: int = 4000) -> str:
        data = self.log.read_bytes() if self.log.exists() else b""
        return data[-size:].decode(errors="replace")

    def cpu_seconds(self) -> float:
        """utime + stime of the process so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def memory_kib(self, key: str) -> int:
        """VmRSS, VmHWM, ... from /proc/<pid>/status, in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def truncate_log(self) -> None:
        """Keep the server's log small between runs (one JSON line per review adds up)."""
        with contextlib.suppress(OSError):
            os.truncate(self.log, 0)

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self in STARTED:
            STARTED.remove(self)
        return self.process.returncode


def stop_all() -> None:
    """End every load generator and server this benchmark started and that still runs."""
    for child in list(CHILDREN):
        if child.poll() is None:
            child.kill()
            child.wait()
        CHILDREN.remove(child)
    for server in list(STARTED):
        server.stop()


def client_context(certs: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs / "ca.crt"))


def _ready(port: int, context: ssl.SSLContext) -> bool:
    connection = http.client.HTTPSConnection(HOST, port, context=context, timeout=2)
    try:
        connection.request("GET", "/readyz")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def core_busy() -> dict[int, tuple[float, float]]:
    """Per core: (busy seconds, steal seconds) since boot, from /proc/stat."""
    out: dict[int, tuple[float, float]] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            ticks = [int(v) for v in values]
            idle = ticks[3] + ticks[4]
            busy = sum(ticks[:8]) - idle - ticks[7]
            out[int(name[3:])] = (busy / CLOCK_TICKS, ticks[7] / CLOCK_TICKS)
    return out
