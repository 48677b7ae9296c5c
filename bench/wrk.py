"""Closed-loop load with Debian's `wrk` (keep-alive connections, one thread, pinned to a core)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.procs import CHILDREN

POST_LUA = Path(__file__).resolve().parent / "post.lua"
MARKER = "BENCH-JSON "


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    errors: int  # connect + read + write + timeouts + non-2xx/3xx statuses
    p50_us: int
    p99_us: int
    p999_us: int
    max_us: int

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


def ensure_wrk() -> str:
    """The wrk binary; `apt-get install -y wrk` first when it is missing and we run as root."""
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() != 0:
        raise SystemExit("wrk is missing: install Debian's package `wrk` (apt-get install wrk)")
    print("wrk is missing: apt-get install -y wrk", flush=True)
    subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=True)
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("apt-get installed wrk but it is not on PATH")
    return found


def run_wrk(
    url: str, targets: list[tuple[str, Path]], connections: int, seconds: float, core: int = 1
) -> WrkResult:
    """POST the targets ((path, body file); several rotate) on `connections` connections."""
    return finish_wrk(start_wrk(url, targets, connections, seconds, core), seconds)


def start_wrk(
    url: str, targets: list[tuple[str, Path]], connections: int, seconds: float, core: int = 1
) -> subprocess.Popen[str]:
    command = [
        *("taskset", "-c", str(core), ensure_wrk()),
        *("-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency", "--timeout", "5s"),
        *("-s", str(POST_LUA), url, "--"),
        *(f"{path}={file}" for path, file in targets),
    ]
    env = {**os.environ, **({"BENCH_ROTATE": "1"} if len(targets) > 1 else {})}
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    CHILDREN.append(process)
    return process


def finish_wrk(process: subprocess.Popen[str], seconds: float) -> WrkResult:
    try:
        stdout, stderr = process.communicate(timeout=seconds + 60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        CHILDREN.remove(process)
    line = next((x for x in stdout.splitlines() if x.startswith(MARKER)), None)
    if process.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({process.returncode}):\n{stdout}\n{stderr}")
    data = orjson.loads(line[len(MARKER) :])
    errors = sum(
        data[k]
        for k in ("connect_errors", "read_errors", "write_errors", "status_errors", "timeouts")
    )
    return WrkResult(
        requests=data["requests"],
        seconds=data["duration_us"] / 1e6,
        errors=errors,
        p50_us=data["p50_us"],
        p99_us=data["p99_us"],
        p999_us=data["p999_us"],
        max_us=data["max_us"],
    )
