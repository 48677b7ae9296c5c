"""The floor webhooks of `python -m bench.create`: servers that answer a constant, started here.

- `go`: bench/floor/main.go, built with the machine's `go` into the tools cache (keyed by the
  source's and Go's hashes: a second run starts at once);
- `python`: the ceiling of `python -m bench` (bench/ceiling.py: a bare ASGI callable under
  uvicorn with uvloop, httptools and the webhook's TLS context).

Both serve over TLS with the benchmark's certificate on loopback, and answer the given patch on
/mutate unless the review contains `done`, otherwise allowed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from dev.processes import free_port, stop_process, wait_until

SOURCE = Path(__file__).with_name("floor") / "main.go"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tpu-webhook" / "tools"


def build() -> Path:
    """The floor binary, built once per source and Go version."""
    go = subprocess.run(["go", "version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256(SOURCE.read_bytes() + go.encode()).hexdigest()[:16]
    binary = CACHE / f"bench-floor-{key}" / "floor"
    if not binary.is_file():
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_suffix(".partial")
        subprocess.run(
            ["go", "build", "-trimpath", "-o", str(partial), str(SOURCE)],
            check=True, env=os.environ | {"CGO_ENABLED": "0", "GO111MODULE": "off"},
        )  # fmt: skip
        partial.rename(binary)
    return binary


class Floor:
    """A floor server (`go` or `python`) on a free loopback port, answering `patch` on /mutate."""

    def __init__(self, language: str, certs: Path, patch: list[dict[str, Any]], done: str) -> None:
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        encoded = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
        cert, key = str(certs / "tls.crt"), str(certs / "tls.key")
        if language == "go":
            self.command = [
                str(build()), "-addr", f"127.0.0.1:{self.port}", "-cert", cert, "-key", key,
                "-patch", encoded, "-done", done,
            ]  # fmt: skip
        elif language == "python":
            self.command = [
                sys.executable, "-m", "bench.ceiling", "--port", str(self.port),
                "--cert", cert, "--key", key, "--patch", encoded, "--done", done,
            ]  # fmt: skip
        else:
            raise ValueError(f"no floor in {language!r}")
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Floor:
        self.process = subprocess.Popen(self.command, start_new_session=True)
        try:
            wait_until(
                f"the floor webhook on port {self.port}",
                time.monotonic() + 20,
                self._listening,
                self._alive,
                RuntimeError,
            )
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _listening(self) -> bool:
        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        return True

    def _alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"the floor webhook exited with {self.process.returncode}")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.process is not None:
            stop_process(self.process, 10)
