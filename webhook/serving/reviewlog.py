"""The one JSON line per review, written in batches.

A logging.LogRecord, a formatter and a write() per review cost more than deciding the review.
A line is a msgspec Struct encoded straight into a buffer, which is written to stderr when it
fills, on a short timer started by the app, and at shutdown: at most `flush_seconds` late, never
lost on a clean exit.
"""

from __future__ import annotations

import os

import msgspec

from webhook.admission.dispatch import Endpoint
from webhook.admission.responses import Mode


class ReviewLine(msgspec.Struct):
    """uid, kind, namespace/name, operation, verdict, rule codes, patch size, duration: never
    the object itself. Built positionally, once per review (keywords cost more)."""

    ts: float
    msg: str  # "review"
    uid: str
    endpoint: Endpoint
    mode: Mode
    kind: str
    namespace: str
    name: str
    operation: str
    outcome: str
    allowed: bool
    rules: list[str]
    patch_ops: int
    dry_run: bool
    duration_ms: float


class ReviewLog:
    def __init__(self, enabled: bool = True, fd: int = 2, max_buffer: int = 64 * 1024) -> None:
        self.enabled = enabled
        self.fd = fd
        self.max_buffer = max_buffer
        self._buffer = bytearray()
        self._encode_into = msgspec.json.Encoder().encode_into

    def write(self, line: ReviewLine) -> None:
        buffer = self._buffer
        self._encode_into(line, buffer, -1)
        buffer += b"\n"
        if len(buffer) >= self.max_buffer:
            self.flush()

    def flush(self) -> None:
        data = memoryview(self._buffer)
        try:
            while data:
                data = data[os.write(self.fd, data) :]
        except OSError:
            pass  # stderr gone (a closed pipe): the review itself was answered
        finally:
            data.release()
            self._buffer.clear()
