"""Events on the owner, decided: which Event a finding makes or counts into, whether the API may
be called now, and the Event itself (core/v1, as `kubectl describe` lists it).

As client-go's EventCorrelator does: one Event per (owner, reason, rule code, message); a repeat
within `CORRELATION_SECONDS` of the last one raises that Event's `count` (a PATCH) instead of
making another, and names the object it was found on last. Calls are rate-limited by token
buckets, one per owner and one for the whole server; a repeat the limit holds back is not lost:
it is written with the next PATCH (`EventBook.dirty`). Pure: the clock is given, the API is
called by serving/ownerevents.py.
"""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from webhook.serving.ownerchain import ObjectRef

COMPONENT = "tpu-webhook"  # source.component and reportingComponent: `kubectl describe`'s From
REASON_DENIED = "TPUWebhookDenied"
REASON_WARNED = "TPUWebhookWarning"
# The API server's limit on an Event's note (events.k8s.io): longer messages are cut to it.
MAX_MESSAGE_BYTES = 1024
CUT = " ... (cut)"
# A repeat this soon after the last one counts into the same Event (client-go: 10 minutes).
CORRELATION_SECONDS = 600.0
# Events remembered for correlation, the least recently seen forgotten first (client-go: 4096).
MAX_EVENTS = 4096
# API calls for one owner: a burst, then one per OWNER_SECONDS (client-go's spam filter: 25,
# then one per 5 minutes); for the whole server: a burst, then GLOBAL_PER_SECOND.
OWNER_BURST = 25
OWNER_SECONDS = 30.0
GLOBAL_BURST = 100
GLOBAL_PER_SECOND = 5.0
# Owners whose bucket is kept (a forgotten owner's next bucket starts full).
MAX_OWNER_BUCKETS = 4096
MAX_NAME_PREFIX = 200  # an Event's name: the owner's (cut to this), a dot, a hex timestamp


class Finding(NamedTuple):
    """One denial or warning as answered (warn mode answers denials as warnings)."""

    code: str
    message: str
    denied: bool

    @property
    def outcome(self) -> str:
        return "denied" if self.denied else "warned"

    @property
    def reason(self) -> str:
        return REASON_DENIED if self.denied else REASON_WARNED


class Key(NamedTuple):
    owner_uid: str
    reason: str
    code: str
    message: str


@dataclass(slots=True)
class Entry:
    """One Event: as last written (`count`) and the repeats not written yet (`pending`)."""

    owner: ObjectRef
    finding: Finding
    name: str
    message: str  # the Event's message: names the object last found
    first_time: str
    last_time: str
    last_seen: float  # the clock's, for the correlation window
    count: int = 0  # 0: not created yet
    pending: int = 1


class EventBook:
    """The Events made recently, by Key, bounded."""

    def __init__(self, size: int = MAX_EVENTS, seconds: float = CORRELATION_SECONDS) -> None:
        self.size = size
        self.seconds = seconds
        self._entries: OrderedDict[Key, Entry] = OrderedDict()
        self._dirty: set[Key] = set()
        self._last_ns = 0

    def __len__(self) -> int:
        return len(self._entries)

    def note(
        self, owner: ObjectRef, finding: Finding, child: str, now: float, wall_ns: int
    ) -> tuple[Key, Entry, bool]:
        """The Entry `finding` on `child` counts into; True when it is a new Event to create."""
        key = Key(owner.uid, finding.reason, finding.code, finding.message)
        message = event_message(child, finding)
        stamp = timestamp(wall_ns)
        entry = self._entries.get(key)
        if entry is not None and entry.count and now - entry.last_seen < self.seconds:
            entry.pending += 1
            entry.message, entry.last_time, entry.last_seen = message, stamp, now
            self._entries.move_to_end(key)
            self._dirty.add(key)
            return key, entry, False
        self._last_ns = max(wall_ns, self._last_ns + 1)  # one name per Event, even in one ns
        name = f"{owner.name[:MAX_NAME_PREFIX].rstrip('.-')}.{self._last_ns:x}"
        entry = Entry(owner, finding, name, message, stamp, stamp, now)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        self._dirty.discard(key)
        while len(self._entries) > self.size:
            gone, _ = self._entries.popitem(last=False)
            self._dirty.discard(gone)
        return key, entry, True

    def written(self, key: Key, entry: Entry) -> None:
        """The Event now holds every repeat noted."""
        entry.count += entry.pending
        entry.pending = 0
        self._dirty.discard(key)

    def forget(self, key: Key) -> None:
        """The Event could not be made (or no longer exists): the next repeat makes a new one."""
        self._entries.pop(key, None)
        self._dirty.discard(key)

    def dirty(self) -> Iterator[tuple[Key, Entry]]:
        """Events with repeats not written yet (a copy: the caller may write them)."""
        for key in list(self._dirty):
            entry = self._entries.get(key)
            if entry is not None:
                yield key, entry


def event_message(child: str, finding: Finding) -> str:
    """`StatefulSet default/lws-0: [tpu.code] <message>`, cut to the API's limit."""
    return cut(f"{child}: [{finding.code}] {finding.message}", MAX_MESSAGE_BYTES)


def cut(text: str, limit: int) -> str:
    """`text` in at most `limit` bytes of UTF-8, saying so when it was cut (never mid-character)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    room = limit - len(CUT.encode())
    return data[:room].decode(errors="ignore") + CUT


def timestamp(wall_ns: int) -> str:
    """RFC 3339 in seconds, UTC (an Event's firstTimestamp and lastTimestamp)."""
    moment = dt.datetime.fromtimestamp(wall_ns // 1_000_000_000, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(entry: Entry, instance: str) -> dict[str, Any]:
    """The core/v1 Event of `entry`, as created."""
    owner = entry.owner
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": entry.name, "namespace": owner.namespace},
        "involvedObject": {
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "name": owner.name,
            "namespace": owner.namespace,
            "uid": owner.uid,
        },
        "type": "Warning",
        "reason": entry.finding.reason,
        "message": entry.message,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance[:128],
        "firstTimestamp": entry.first_time,
        "lastTimestamp": entry.last_time,
        "count": entry.pending,
    }


def repeat_patch(entry: Entry) -> dict[str, Any]:
    """The merge patch that writes `entry`'s repeats into its Event."""
    return {
        "count": entry.count + entry.pending,
        "lastTimestamp": entry.last_time,
        "message": entry.message,
    }


class TokenBucket:
    """`burst` calls at once, then `per_second` (refilled continuously)."""

    __slots__ = ("burst", "per_second", "stamp", "tokens")

    def __init__(self, burst: int, per_second: float, now: float) -> None:
        self.burst = burst
        self.per_second = per_second
        self.tokens = float(burst)
        self.stamp = now

    def ready(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.per_second)
        self.stamp = now
        return self.tokens >= 1

    def take(self) -> None:
        self.tokens -= 1


class Limits:
    """The server's bucket and one per owner (bounded, least recently used forgotten)."""

    def __init__(
        self,
        owner_burst: int = OWNER_BURST,
        owner_seconds: float = OWNER_SECONDS,
        global_burst: int = GLOBAL_BURST,
        global_per_second: float = GLOBAL_PER_SECOND,
        owners: int = MAX_OWNER_BUCKETS,
    ) -> None:
        self.owner_burst = owner_burst
        self.owner_rate = 1 / owner_seconds
        self.owners = owners
        self.everyone = TokenBucket(global_burst, global_per_second, 0.0)
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def allow(self, now: float, owner_uid: str | None = None) -> bool:
        """Whether one call may be made now (for `owner_uid`: within its own limit too); if so,
        it is counted."""
        if not self.everyone.ready(now):
            return False
        if owner_uid is None:
            self.everyone.take()
            return True
        bucket = self._buckets.get(owner_uid)
        if bucket is None:
            bucket = self._buckets[owner_uid] = TokenBucket(self.owner_burst, self.owner_rate, now)
            while len(self._buckets) > self.owners:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(owner_uid)
        if not bucket.ready(now):
            return False
        bucket.take()
        self.everyone.take()
        return True
