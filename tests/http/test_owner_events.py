"""What the endpoint hands the owner-event recorder after it answers: the findings of an object
a controller made, and nothing else."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest
from starlette.testclient import TestClient

from tests.http.conftest import review, tpu_pod
from webhook.serving.app import Webhook, create_app
from webhook.serving.eventbook import Finding
from webhook.serving.ownerchain import ObjectRef
from webhook.serving.ownerqueue import DROPPED, OwnerEventQueue, Record
from webhook.settings import Settings

JOB_REF = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "name": "train",
    "uid": "b1e2c3d4",
    "controller": True,
    "blockOwnerDeletion": True,
}
JOB = ObjectRef("batch/v1", "Job", "train", "team-a", "b1e2c3d4")
CHIPS = (
    "spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 3: "
    "tpu-v5-lite-podslice 2x4 runs 4 or 8 chips per host; set requests and limits to 4 or 8"
)


def owned(pod: dict[str, Any], *refs: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["ownerReferences"] = list(refs)
    return pod


@pytest.fixture
def served() -> Iterator[tuple[TestClient, Webhook]]:
    app = create_app(Settings())
    webhook: Webhook = app.state.webhook
    webhook.owner_events.enabled = True  # as the recorder opens it
    with TestClient(app) as client:
        yield client, webhook


def records(queue: OwnerEventQueue) -> list[Record]:
    found = []
    while (record := queue.take(0)) is not None:
        found.append(record)
    return found


def test_a_denied_pod_of_a_job_is_handed_over_with_its_controller(
    served: tuple[TestClient, Webhook],
) -> None:
    client, webhook = served
    answer = client.post("/validate", json=review(owned(tpu_pod("3"), JOB_REF), "Pod")).json()
    assert answer["response"]["allowed"] is False
    assert records(webhook.owner_events) == [
        Record(
            "Pod team-a/infer",
            JOB,
            (Finding("tpu.chips-per-host", CHIPS, denied=True),),
            "validate",
            "enforce",
        )
    ]


def test_in_warn_mode_the_denial_is_handed_over_as_the_warning_it_was_answered(
    served: tuple[TestClient, Webhook],
) -> None:
    client, webhook = served
    answer = client.post("/validate/warn", json=review(owned(tpu_pod("3"), JOB_REF), "Pod")).json()
    assert answer["response"]["allowed"] is True
    (record,) = records(webhook.owner_events)
    assert (record.findings, record.mode) == (
        (Finding("tpu.chips-per-host", CHIPS, denied=False),),
        "warn",
    )


NOTHING = {
    "a dry run": (owned(tpu_pod("3"), JOB_REF), {"dryRun": True}),
    "no finding": (owned(tpu_pod("8"), JOB_REF), {}),
    "no owner: its author saw the denial": (tpu_pod("3"), {}),
    "a mirror Pod (its Node is no workload's maker)": (
        owned(tpu_pod("3"), {**JOB_REF, "apiVersion": "v1", "kind": "Node", "name": "node-1"}),
        {},
    ),
    "an owner that is not the controller": (
        owned(tpu_pod("3"), {**JOB_REF, "controller": False}),
        {},
    ),
}


@pytest.mark.parametrize(("pod", "request_fields"), NOTHING.values(), ids=list(NOTHING))
def test_nothing_is_handed_over_for(
    served: tuple[TestClient, Webhook], pod: dict[str, Any], request_fields: dict[str, Any]
) -> None:
    client, webhook = served
    for path in ("/mutate", "/validate"):
        assert client.post(path, json=review(pod, "Pod", **request_fields)).status_code == 200
    assert records(webhook.owner_events) == []


def test_without_a_recorder_the_queue_stays_closed() -> None:
    app = create_app(Settings())
    with TestClient(app) as client:
        client.post("/validate", json=review(owned(tpu_pod("3"), JOB_REF), "Pod"))
    assert records(app.state.webhook.owner_events) == []


def test_a_full_queue_drops_the_record_and_counts_its_findings() -> None:
    app = create_app(Settings())
    webhook: Webhook = app.state.webhook
    queue = OwnerEventQueue(size=1)
    queue.enabled = True
    object.__setattr__(webhook, "owner_events", queue)
    for endpoint in app.admission.values():
        object.__setattr__(endpoint, "owner_events", queue)
    webhook.metrics.owner_events = queue.counts.snapshot
    with TestClient(app) as client:
        for _ in range(3):
            client.post("/validate", json=review(owned(tpu_pod("3"), JOB_REF), "Pod"))
    assert len(records(queue)) == 1
    assert queue.counts.snapshot() == {(DROPPED, "tpu.chips-per-host", "denied"): 2}
    scraped = generate_latest(webhook.metrics.registry).decode()
    assert (
        'tpu_webhook_owner_events_total{outcome="denied",result="dropped",'
        'rule="tpu.chips-per-host"} 2.0'
    ) in scraped
