"""The one JSON line per review, written in batches.

A logging.LogRecord, a formatter and a write() per review cost more than deciding the review.
Lines are appended to a buffer and written to stderr when it fills, on a short timer started by
the app, and at shutdown: at most `flush_seconds` late, never lost on a clean exit.
"""

from __future__ import annotations

import os
from typing import Any

import orjson


class ReviewLog:
    def __init__(self, enabled: bool = True, fd: int = 2, max_buffer: int = 64 * 1024) -> None:
        self.enabled = enabled
        self.fd = fd
        self.max_buffer = max_buffer
        self._buffer = bytearray()

    def write(self, line: dict[str, Any]) -> None:
        self._buffer += orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE)
        if len(self._buffer) >= self.max_buffer:
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
