"""Events on the owner: the warnings and denials of an object a controller made (a JobSet's Job, a
Job's Pod, a LeaderWorkerSet's StatefulSet or Pod) recorded as Kubernetes Events on the object a
person wrote, the top of its controlling owners, so that `kubectl describe` on it shows them. The
controller alone was told; nobody reads its log.

One thread, off the request path: it takes the records the endpoint queued after answering
(serving/ownerqueue.py), finds the top owner (serving/ownerchain.py, cached), and makes an Event
or counts a repeat into one (serving/eventbook.py), within the rate limits. A failure is logged
and counted, never raised. RBAC: `get` on the owner kinds (ownerchain.OWNER_RESOURCES), `create`
and `patch` on events (the chart's templates/owner-events.yaml).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook.certificates.kubeapi import ApiError
from webhook.serving.eventbook import (
    Entry,
    EventBook,
    Finding,
    Key,
    Limits,
    event_body,
    repeat_patch,
)
from webhook.serving.ownerchain import ObjectRef, OwnerCache, object_path
from webhook.serving.ownerqueue import (
    CORRELATED,
    DROPPED,
    FAILED,
    RECORDED,
    OwnerEventQueue,
    Record,
)

log = logging.getLogger("tpu_webhook.events")

# Without records, the thread writes held-back repeats this often.
IDLE_SECONDS = 1.0
# A failure of one kind (its HTTP status) is logged at most this often.
LOG_EVERY_SECONDS = 60.0
# A read, create or patch answered with these ends the walk there (the owner is not readable).
UNREADABLE = frozenset({403, 404})


class EventApi(Protocol):
    """The calls the recorder makes (certificates/kubeapi.KubeApi's)."""

    def get(self, path: str) -> dict[str, Any]: ...

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None: ...

    def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...


class Held(Exception):
    """The rate limit holds an owner read back: the record is dropped."""


@dataclass
class OwnerEvents:
    api: EventApi
    queue: OwnerEventQueue
    instance: str = field(default_factory=socket.gethostname)  # the Pod's name, in a cluster
    book: EventBook = field(default_factory=EventBook)
    owners: OwnerCache = field(default_factory=OwnerCache)
    limits: Limits = field(default_factory=Limits)
    clock: Callable[[], float] = time.monotonic
    wall_ns: Callable[[], int] = time.time_ns
    stop: threading.Event = field(default_factory=threading.Event)
    logged: dict[int, float] = field(default_factory=dict)  # status -> when last logged

    async def run(self) -> None:
        """Records, for as long as the app runs (a background task of the app)."""
        self.queue.enabled = True
        threading.Thread(target=self.work, name="owner-events", daemon=True).start()
        try:
            await asyncio.Event().wait()
        finally:
            self.queue.enabled = False
            self.stop.set()

    def work(self) -> None:
        flushed = self.clock()
        while not self.stop.is_set():
            record = self.queue.take(IDLE_SECONDS)
            try:
                if record is not None:
                    self.handle(record)
                if record is None or self.clock() - flushed >= IDLE_SECONDS:
                    flushed = self.clock()
                    self.flush()
            except Exception:
                log.exception("owner events: a record failed")

    def handle(self, record: Record) -> None:
        """The record's findings as Events on the top of its owners."""
        try:
            owner = self.owners.top(record.owner, self.read)
        except Exception as error:  # the API's refusal, or no connection to it
            result = DROPPED if isinstance(error, Held) else FAILED
            if result == FAILED:
                self._warn(f"reading the owners of {record.child}", error)
            for finding in record.findings:
                self.queue.counts.add(result, finding)
            return
        for finding in record.findings:
            self.record(owner, finding, record.child)

    def read(self, ref: ObjectRef) -> Mapping[str, Any] | None:
        """An owner, or None when it cannot be read (ownerchain.Lookup)."""
        path = object_path(ref)
        if path is None:
            return None
        if not self.limits.allow(self.clock()):
            raise Held
        try:
            return self.api.get(path)
        except ApiError as error:
            if error.status in UNREADABLE:
                return None
            raise

    def record(self, owner: ObjectRef, finding: Finding, child: str) -> None:
        now = self.clock()
        key, entry, new = self.book.note(owner, finding, child, now, self.wall_ns())
        if not new:
            self.queue.counts.add(CORRELATED, finding)
            self.write_repeats(key, entry, now)
            return
        if not self.limits.allow(now, owner.uid):
            self.book.forget(key)
            self.queue.counts.add(DROPPED, finding)
            return
        try:
            self.api.create_event(owner.namespace, event_body(entry, self.instance))
        except Exception as error:
            self.book.forget(key)
            self.queue.counts.add(FAILED, finding)
            self._warn(f"creating an Event on {owner.describe()}", error)
            return
        self.book.written(key, entry)
        self.queue.counts.add(RECORDED, finding)

    def write_repeats(self, key: Key, entry: Entry, now: float) -> None:
        """Count the repeats into the Event now, or leave them for a later flush (rate limit).
        An Event that is gone (404: Events expire, an hour by default) is forgotten: the next
        repeat makes a new one."""
        if not self.limits.allow(now, entry.owner.uid):
            return
        try:
            self.api.patch_event(entry.owner.namespace, entry.name, repeat_patch(entry))
        except Exception as error:
            self.book.forget(key)
            self.queue.counts.add(FAILED, entry.finding, entry.pending)
            if not isinstance(error, ApiError) or error.status != 404:
                self._warn(f"counting into Event {entry.name}", error)
            return
        self.book.written(key, entry)

    def flush(self) -> None:
        """Write the repeats held back by the rate limit."""
        now = self.clock()
        for key, entry in self.book.dirty():
            self.write_repeats(key, entry, now)

    def _warn(self, doing: str, error: Exception) -> None:
        """Log a failure, once a minute per status (a missing RBAC rule, or an API server out of
        reach, fails every call)."""
        status = error.status if isinstance(error, ApiError) else 0
        now = self.clock()
        if now - self.logged.get(status, float("-inf")) >= LOG_EVERY_SECONDS:
            self.logged[status] = now
            log.warning("owner events: %s failed: %s", doing, error)
