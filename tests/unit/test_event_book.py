"""Events on the owner, decided: one Event per (owner, reason, rule, message), repeats counted
into it, the rate limits, and the Event `kubectl describe` lists."""

from __future__ import annotations

import pytest

from webhook.serving.eventbook import (
    CUT,
    MAX_MESSAGE_BYTES,
    Entry,
    EventBook,
    Finding,
    Key,
    Limits,
    TokenBucket,
    cut,
    event_body,
    event_message,
    repeat_patch,
    timestamp,
)
from webhook.serving.ownerchain import ObjectRef

LWS = ObjectRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "lws", "team-a", "uid-lws")
JOBSET = ObjectRef("jobset.x-k8s.io/v1alpha2", "JobSet", "train", "team-a", "uid-train")
MISSING = Finding(
    "tpu.topology-missing",
    "spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Required value: set it",
    denied=True,
)
UNKNOWN = Finding("tpu.accelerator-unknown", "spec.nodeSelector[...]: Unsupported value", False)
WALL = 1_796_220_000_123_456_789  # 2026-12-02T14:00:00Z and some


def note(
    book: EventBook, finding: Finding, child: str, now: float, owner: ObjectRef = LWS
) -> tuple[Key, Entry, bool]:
    return book.note(owner, finding, child, now, WALL + int(now * 1e9))


def test_a_repeat_within_the_window_counts_into_the_event_and_names_the_last_object() -> None:
    book = EventBook(seconds=600)
    key, first, new = note(book, MISSING, "Pod team-a/lws-0", 0)
    assert new
    book.written(key, first)
    again, entry, new = note(book, MISSING, "Pod team-a/lws-1", 599)
    assert (again, entry, new) == (key, first, False)
    assert (entry.count, entry.pending) == (1, 1)
    assert entry.message.startswith("Pod team-a/lws-1: [tpu.topology-missing] ")
    assert list(book.dirty()) == [(key, entry)]
    assert repeat_patch(entry) == {
        "count": 2,
        "lastTimestamp": timestamp(WALL + 599 * 10**9),
        "message": entry.message,
    }
    book.written(key, entry)
    assert (entry.count, entry.pending, list(book.dirty())) == (2, 0, [])


WINDOW = {
    "after the window": (MISSING, "Pod team-a/lws-0", LWS, 600),
    "another rule or message": (UNKNOWN, "Pod team-a/lws-0", LWS, 1),
    "the same finding as a warning (warn mode)": (
        MISSING._replace(denied=False),
        "Pod team-a/lws-0",
        LWS,
        1,
    ),
    "another owner": (MISSING, "Job team-a/train-w-0", JOBSET, 1),
}


@pytest.mark.parametrize(("finding", "child", "owner", "later"), WINDOW.values(), ids=list(WINDOW))
def test_a_new_event_is_made_for(
    finding: Finding, child: str, owner: ObjectRef, later: float
) -> None:
    book = EventBook(seconds=600)
    key, first, _ = note(book, MISSING, "Pod team-a/lws-0", 0)
    book.written(key, first)
    _, entry, new = note(book, finding, child, later, owner)
    assert new
    assert entry.name != first.name
    assert (entry.count, entry.pending) == (0, 1)


def test_an_event_that_was_not_made_is_made_by_the_next_repeat() -> None:
    book = EventBook()
    key, _, _ = note(book, MISSING, "Pod team-a/lws-0", 0)
    book.forget(key)
    assert note(book, MISSING, "Pod team-a/lws-0", 1)[2]


def test_the_book_forgets_the_least_recently_seen_event_beyond_its_size() -> None:
    book = EventBook(size=2)
    for n in range(3):
        key, entry, _ = note(book, MISSING._replace(message=f"m{n}"), "Pod team-a/lws-0", n)
        book.written(key, entry)
    assert len(book) == 2
    assert note(book, MISSING._replace(message="m0"), "Pod team-a/lws-0", 4)[2]
    assert not note(book, MISSING._replace(message="m2"), "Pod team-a/lws-0", 5)[2]


def test_events_made_in_the_same_nanosecond_get_different_names() -> None:
    book = EventBook()
    names = {
        book.note(LWS, MISSING._replace(message=str(n)), "x", 0, WALL)[1].name for n in range(3)
    }
    assert len(names) == 3
    assert all(name.startswith("lws.") for name in names)


def test_a_long_owner_name_is_cut_to_a_valid_event_name() -> None:
    long = LWS._replace(name="a" * 199 + "-" + "b" * 53)
    name = EventBook().note(long, MISSING, "x", 0, WALL)[1].name
    assert name == "a" * 199 + f".{WALL:x}"
    assert len(name) <= 253


def test_the_event_is_a_warning_on_the_owner_from_tpu_webhook() -> None:
    book = EventBook()
    _, entry, _ = note(book, MISSING, "Pod team-a/lws-0", 0)
    assert event_body(entry, "tpu-webhook-7d9c-x2x") == {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": entry.name, "namespace": "team-a"},
        "involvedObject": {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "name": "lws",
            "namespace": "team-a",
            "uid": "uid-lws",
        },
        "type": "Warning",
        "reason": "TPUWebhookDenied",
        "message": "Pod team-a/lws-0: [tpu.topology-missing] "
        "spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Required value: set it",
        "source": {"component": "tpu-webhook"},
        "reportingComponent": "tpu-webhook",
        "reportingInstance": "tpu-webhook-7d9c-x2x",
        "firstTimestamp": "2026-12-02T14:00:00Z",
        "lastTimestamp": "2026-12-02T14:00:00Z",
        "count": 1,
    }
    assert UNKNOWN.reason == "TPUWebhookWarning"


CUTS = {
    "short": ("a" * 10, "a" * 10),
    "exactly the limit": ("a" * MAX_MESSAGE_BYTES, "a" * MAX_MESSAGE_BYTES),
    "one byte over": ("a" * (MAX_MESSAGE_BYTES + 1), "a" * (MAX_MESSAGE_BYTES - len(CUT)) + CUT),
    # a 3-byte character across the cut is left out whole, never halved
    "multi-byte": ("é" + "€" * 600, "é" + "€" * ((MAX_MESSAGE_BYTES - len(CUT) - 2) // 3) + CUT),
}


@pytest.mark.parametrize(("text", "expected"), CUTS.values(), ids=list(CUTS))
def test_a_message_is_cut_to_the_api_s_limit(text: str, expected: str) -> None:
    assert cut(text, MAX_MESSAGE_BYTES) == expected
    assert len(expected.encode()) <= MAX_MESSAGE_BYTES


def test_the_event_message_names_the_object_and_the_rule_and_fits() -> None:
    long = MISSING._replace(message="x" * 5000)
    message = event_message("StatefulSet team-a/lws-0", long)
    assert message.startswith("StatefulSet team-a/lws-0: [tpu.topology-missing] xxx")
    assert message.endswith(CUT)
    assert len(message.encode()) == MAX_MESSAGE_BYTES


def test_a_bucket_allows_its_burst_then_refills_at_its_rate() -> None:
    bucket = TokenBucket(burst=2, per_second=0.5, now=0)
    taken = []
    for now in (0, 0, 0, 1, 2, 2, 100):
        ready = bucket.ready(now)
        if ready:
            bucket.take()
        taken.append(ready)
    assert taken == [True, True, False, False, True, False, True]


def test_each_owner_has_its_own_limit_within_the_server_s() -> None:
    limits = Limits(owner_burst=2, owner_seconds=60, global_burst=3, global_per_second=1)
    assert [limits.allow(0, "a") for _ in range(3)] == [True, True, False]
    assert limits.allow(0, "b")  # another owner: its own burst, the server's last call
    assert not limits.allow(0, "c")  # the server's burst is spent
    assert not limits.allow(0)  # an owner read counts against the server's limit only
    assert limits.allow(1)
    assert not limits.allow(1, "a")  # the server refilled one; owner a has none for 60 s


def test_a_forgotten_owner_s_bucket_starts_full() -> None:
    limits = Limits(owner_burst=1, owner_seconds=3600, global_burst=100, owners=1)
    assert limits.allow(0, "a")
    assert not limits.allow(0, "a")
    assert limits.allow(0, "b")  # a is forgotten
    assert limits.allow(0, "a")
