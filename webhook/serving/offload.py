"""Large reviews are decided off the event loop, one at a time, with the garbage collector paused.

The event loop answers every other review and the health probes: a review of a few kilobytes is
decided inline in well under a millisecond, but one of megabytes takes tens of milliseconds to
decode. Such a review waits for one of `SLOTS` places before its body is even read (the others
stay in the socket: no memory), then is decoded and decided in the one worker thread, where the
loop still gets the interpreter every few milliseconds. A review whose client gave up while it
waited is dropped when its turn comes (its body read sees the disconnect): it costs nothing.

The collector is paused while one runs: the object graph a decode makes has no cycles and is
freed by reference counting, and collections triggered by its hundreds of thousands of objects
would otherwise traverse all of them, several times (bench/RESULTS.md: 3-5x the decode time).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# Bodies larger than this (or of unknown length: chunked) are decided off the loop.
LARGE_BODY_BYTES = 64 * 1024
# Large reviews held at once: one being decided, one read and waiting. Each holds at most the
# body cap (3 MiB) plus, while decided, its decoded object.
SLOTS = 2


class Offload:
    def __init__(self, threshold: int = LARGE_BODY_BYTES, slots: int = SLOTS) -> None:
        self.threshold = threshold
        self.slots = asyncio.Semaphore(slots)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="large-review")

    def inline(self, length: int | None) -> bool:
        """Whether a body of this declared length is decided on the loop."""
        return length is not None and length <= self.threshold

    async def run(self, work: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, _paused, work)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


def _paused(work: Callable[[], T]) -> T:
    """`work()` with the collector off (one worker thread: the pairs never interleave)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return work()
    finally:
        if was:
            gc.enable()
