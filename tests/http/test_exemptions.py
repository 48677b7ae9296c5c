"""The opt-outs as the admin configures them (chart `webhook.exemptions`): exact answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.http.conftest import review, tpu_pod
from webhook.serving.app import create_app
from webhook.settings import Settings

UID = "705ab4f5-6393-11e8-b7cc-42010a800002"
CHIPS_MESSAGE = (
    "spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 3: "
    "tpu-v5-lite-podslice 2x4 runs 4 or 8 chips per host; set requests and limits to 4 or 8"
)
ALLOWED = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "response": {"uid": UID, "allowed": True},
}
DENIED = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "response": {
        "uid": UID,
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": CHIPS_MESSAGE},
        "auditAnnotations": {"violations": "tpu.chips-per-host"},
    },
}


def client_of(**settings: Any) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(**settings))) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def research_only() -> Iterator[TestClient]:
    yield from client_of(exemption_namespaces=frozenset({"research"}))


@pytest.fixture(scope="module")
def no_label() -> Iterator[TestClient]:
    yield from client_of(honour_opt_out_label=False)


def labelled_broken_pod() -> dict[str, Any]:
    pod = tpu_pod(chips="3")
    pod["metadata"]["labels"] = {"tpu-webhook.io/ignore": "true"}
    return pod


def annotated_broken_pod() -> dict[str, Any]:
    pod = tpu_pod(chips="3")
    pod["metadata"]["annotations"] = {"cloud.google.com/skip-tpu-webhook-check": "true"}
    return pod


def answer(client: TestClient, obj: dict[str, Any], namespace: str) -> Any:
    response = client.post("/validate", json=review(obj, "Pod", namespace=namespace))
    assert response.status_code == 200
    return response.json()


def test_the_opt_out_label_is_honoured_in_a_listed_namespace(research_only: TestClient) -> None:
    assert answer(research_only, labelled_broken_pod(), "research") == ALLOWED


def test_the_opt_out_label_is_ignored_outside_the_listed_namespaces(
    research_only: TestClient,
) -> None:
    assert answer(research_only, labelled_broken_pod(), "team-a") == DENIED


def test_the_skip_annotation_is_ignored_outside_the_listed_namespaces(
    research_only: TestClient,
) -> None:
    assert answer(research_only, annotated_broken_pod(), "team-a") == DENIED
    assert answer(research_only, annotated_broken_pod(), "research") == ALLOWED


def test_a_label_turned_off_opts_nothing_out_anywhere(no_label: TestClient) -> None:
    assert answer(no_label, labelled_broken_pod(), "research") == DENIED
    assert answer(no_label, annotated_broken_pod(), "research") == ALLOWED


def test_a_label_turned_off_patches_a_labelled_pod_too(no_label: TestClient) -> None:
    pod = tpu_pod(chips="8")
    del pod["spec"]["containers"][0]["ports"]
    pod["metadata"]["labels"] = {"tpu-webhook.io/ignore": "true"}
    response = no_label.post("/mutate", json=review(pod, "Pod", namespace="team-a")).json()
    assert response["response"]["patchType"] == "JSONPatch"
