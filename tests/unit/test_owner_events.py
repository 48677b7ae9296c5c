"""The recorder's steps over a small fake world (stored owners, the Events made, the calls and
their failures), at a given time: what is created, counted into, held back, dropped or failed.
Against the real API server: tests/e2e/test_owner_events.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from webhook.certificates.kubeapi import ApiError
from webhook.serving.eventbook import EventBook, Finding, Limits
from webhook.serving.ownerchain import ObjectRef, object_path
from webhook.serving.ownerevents import OwnerEvents
from webhook.serving.ownerqueue import OwnerEventQueue, Record

NS = "team-a"
JOB = ObjectRef("batch/v1", "Job", "train-slice-0", NS, "uid-job")
JOBSET = ObjectRef("jobset.x-k8s.io/v1alpha2", "JobSet", "train", NS, "uid-jobset")
DENIED = Finding("tpu.topology-missing", "spec.nodeSelector[...]: Required value", denied=True)
WALL = 1_796_220_000 * 10**9


def stored(item: ObjectRef, owner: ObjectRef | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": item.name, "namespace": NS, "uid": item.uid}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner.uid,
                "controller": True,
            }
        ]
    return {"apiVersion": item.api_version, "kind": item.kind, "metadata": metadata}


class World:
    """The API as the recorder sees it: objects by path, Events by name, and the status each
    kind of call fails with (0: it works; -1: no connection)."""

    def __init__(self, *objects: tuple[ObjectRef, ObjectRef | None]) -> None:
        self.objects = {object_path(item): stored(item, owner) for item, owner in objects}
        self.events: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.fail = {"get": 0, "create": 0, "patch": 0}

    def _call(self, call: str) -> None:
        self.calls.append(call)
        if self.fail[call] == -1:
            raise ConnectionRefusedError("[Errno 111] Connection refused")
        if self.fail[call]:
            raise ApiError(f"{self.fail[call]}: refused", self.fail[call])

    def get(self, path: str) -> dict[str, Any]:
        self._call("get")
        if path not in self.objects:
            raise ApiError("404: not found", 404)
        return self.objects[path]

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        self._call("create")
        self.events[event["metadata"]["name"]] = dict(event)

    def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self._call("patch")
        if name not in self.events:
            raise ApiError("404: not found", 404)
        self.events[name].update(patch)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def recorder(world: World, limits: Limits | None = None) -> tuple[OwnerEvents, Clock]:
    clock = Clock()
    events = OwnerEvents(
        world,
        OwnerEventQueue(),
        instance="tpu-webhook-0",
        book=EventBook(),
        limits=limits or Limits(),
        clock=clock,
        wall_ns=lambda: WALL + int(clock.now * 1e9),
    )
    return events, clock


def record(pod: str = "train-slice-0-0-x7k2p") -> Record:
    return Record(f"Pod {NS}/{pod}", JOB, (DENIED,), "validate", "enforce")


def test_a_pod_s_denial_is_an_event_on_its_job_s_jobset_and_repeats_count_into_it() -> None:
    world = World((JOB, JOBSET), (JOBSET, None))
    events, _ = recorder(world)
    events.handle(record("train-slice-0-0-a"))
    events.handle(record("train-slice-0-0-b"))
    (event,) = world.events.values()
    assert event["involvedObject"]["uid"] == JOBSET.uid
    assert event["count"] == 2
    assert event["message"].startswith(f"Pod {NS}/train-slice-0-0-b: [tpu.topology-missing] ")
    assert world.calls == ["get", "get", "create", "patch"]  # the walk once: cached
    assert events.queue.counts.snapshot() == {
        ("recorded", "tpu.topology-missing", "denied"): 1,
        ("correlated", "tpu.topology-missing", "denied"): 1,
    }


def test_repeats_the_owner_s_limit_holds_back_are_written_when_it_allows() -> None:
    world = World((JOB, None))
    events, clock = recorder(world, Limits(owner_burst=1, owner_seconds=10))
    for _ in range(3):
        events.handle(record())
    (event,) = world.events.values()
    assert (event["count"], world.calls.count("patch")) == (1, 0)
    events.flush()
    assert world.calls.count("patch") == 0  # still within the limit
    clock.now += 10
    events.flush()
    assert (event["count"], world.calls.count("patch")) == (3, 1)


def test_an_event_the_api_refuses_is_counted_failed_and_made_by_the_next_repeat() -> None:
    world = World((JOB, None))
    events, _ = recorder(world)
    world.fail["create"] = 403
    events.handle(record())
    assert world.events == {}
    world.fail["create"] = 0
    events.handle(record())
    (event,) = world.events.values()
    assert event["count"] == 1
    assert events.queue.counts.snapshot() == {
        ("failed", "tpu.topology-missing", "denied"): 1,
        ("recorded", "tpu.topology-missing", "denied"): 1,
    }


def test_an_expired_event_is_forgotten_and_the_next_repeat_makes_a_new_one() -> None:
    world = World((JOB, None))
    events, _ = recorder(world)
    events.handle(record())
    world.events.clear()  # expired (an hour by default)
    events.handle(record())  # its patch: 404
    events.handle(record())
    (event,) = world.events.values()
    assert event["count"] == 1
    assert world.calls == ["get", "create", "patch", "create"]


def test_an_owner_it_may_not_read_gets_the_event() -> None:
    world = World((JOB, JOBSET), (JOBSET, None))
    world.fail["get"] = 403
    events, _ = recorder(world)
    events.handle(record())
    (event,) = world.events.values()
    assert event["involvedObject"]["kind"] == "Job"


def test_a_failing_read_fails_the_record_and_is_read_again_next_time() -> None:
    world = World((JOB, JOBSET), (JOBSET, None))
    world.fail["get"] = 500
    events, _ = recorder(world)
    events.handle(record())
    assert world.events == {}
    world.fail["get"] = 0
    events.handle(record())
    (event,) = world.events.values()
    assert event["involvedObject"]["kind"] == "JobSet"
    assert events.queue.counts.snapshot()[("failed", "tpu.topology-missing", "denied")] == 1


def test_the_server_s_limit_drops_a_record_whose_owners_it_cannot_read() -> None:
    world = World((JOB, None))
    events, _ = recorder(world, Limits(global_burst=0))
    events.handle(record())
    assert world.calls == []
    assert events.queue.counts.snapshot() == {("dropped", "tpu.topology-missing", "denied"): 1}


def test_an_api_server_out_of_reach_fails_the_records_and_is_logged_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World((JOB, None))
    world.fail["get"] = -1
    events, clock = recorder(world)
    for _ in range(3):
        events.handle(record())
    clock.now += 60
    events.handle(record())
    assert events.queue.counts.snapshot() == {("failed", "tpu.topology-missing", "denied"): 4}
    warned = [r.getMessage() for r in caplog.records if r.name == "tpu_webhook.events"]
    assert (
        warned
        == [
            f"owner events: reading the owners of Pod {NS}/train-slice-0-0-x7k2p failed: "
            "[Errno 111] Connection refused"
        ]
        * 2
    )
