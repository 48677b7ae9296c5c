"""The exact AdmissionReview JSON the API server gets back, for every kind of answer."""

from __future__ import annotations

import base64
import json
from typing import Any

from starlette.testclient import TestClient

from tests.http.conftest import review, tpu_pod

UID = "705ab4f5-6393-11e8-b7cc-42010a800002"
CHIPS_MESSAGE = (
    "spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 3: "
    "tpu-v5-lite-podslice 2x4 runs 4 or 8 chips per host; set requests and limits to 4 or 8"
)


def post(client: TestClient, path: str, body: Any) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    result: dict[str, Any] = response.json()
    return result


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["response"]["patch"]))
    return ops


def test_allows_a_non_tpu_pod_untouched(client: TestClient) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]},
    }
    for path in ("/mutate", "/validate"):
        assert post(client, path, review(pod, "Pod")) == {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": UID, "allowed": True},
        }


def test_allows_a_correct_single_host_pod_without_a_patch(client: TestClient) -> None:
    assert post(client, "/validate", review(tpu_pod(), "Pod")) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": UID, "allowed": True},
    }


def test_denies_a_chip_count_no_host_shape_runs_with_a_field_error(client: TestClient) -> None:
    assert post(client, "/validate", review(tpu_pod(chips="3"), "Pod")) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": UID,
            "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": CHIPS_MESSAGE},
            "auditAnnotations": {"violations": "tpu.chips-per-host"},
        },
    }


def test_aggregates_several_violations_like_kubernetes(client: TestClient) -> None:
    pod = tpu_pod(chips="3")
    pod["spec"]["containers"][0]["resources"]["requests"]["google.com/tpu"] = "5"
    response = post(client, "/validate", review(pod, "Pod"))["response"]
    assert response["status"]["message"] == (
        f"[{CHIPS_MESSAGE}, spec.containers[0].resources.limits[google.com/tpu]: Invalid value: "
        "3: must equal requests[google.com/tpu] (5); a Pod runs all chips of its host, set "
        "both to the same count]"
    )
    assert response["auditAnnotations"] == {
        "violations": "tpu.chips-per-host,tpu.requests-limits-differ"
    }


def test_warn_mode_admits_and_turns_violations_into_warnings(client: TestClient) -> None:
    for path in ("/validate/warn", "/validate?mode=warn"):
        assert post(client, path, review(tpu_pod(chips="3"), "Pod")) == {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": UID,
                "allowed": True,
                "warnings": [CHIPS_MESSAGE],
                "auditAnnotations": {"violations": "tpu.chips-per-host", "mode": "warn"},
            },
        }


def test_patches_missing_limits_and_ports_with_a_base64_json_patch(client: TestClient) -> None:
    pod = tpu_pod()
    del pod["spec"]["containers"][0]["resources"]["limits"]
    del pod["spec"]["containers"][0]["ports"]
    response = post(client, "/mutate", review(pod, "Pod"))
    assert decoded_patch(response) == [
        {
            "op": "add",
            "path": "/spec/containers/0/resources/limits",
            "value": {"google.com/tpu": "8"},
        },
        {
            "op": "add",
            "path": "/spec/containers/0/ports",
            "value": [
                {"name": "tpu-comm", "containerPort": 8471, "protocol": "TCP"},
                {"name": "tpu-metrics", "containerPort": 8431, "protocol": "TCP"},
            ],
        },
    ]
    del response["response"]["patch"]
    assert response == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": UID,
            "allowed": True,
            "patchType": "JSONPatch",
            "auditAnnotations": {"patch-operations": "2"},
        },
    }


def test_dry_run_gets_the_same_answer(client: TestClient) -> None:
    normal = post(client, "/validate", review(tpu_pod(chips="3"), "Pod"))
    dry = post(client, "/validate", review(tpu_pod(chips="3"), "Pod", dryRun=True))
    assert dry == normal


def test_answers_v1beta1_in_v1beta1(client: TestClient) -> None:
    body = review(tpu_pod(chips="3"), "Pod")
    body["apiVersion"] = "admission.k8s.io/v1beta1"
    response = post(client, "/validate", body)
    assert response["apiVersion"] == "admission.k8s.io/v1beta1"
    assert response["response"]["allowed"] is False
    assert response["response"]["uid"] == UID


def test_update_denies_only_violations_the_update_introduces(client: TestClient) -> None:
    old = tpu_pod(chips="3")
    new = tpu_pod(chips="3")
    new["metadata"]["labels"] = {"team": "a"}
    unchanged = post(client, "/validate", review(new, "Pod", operation="UPDATE", oldObject=old))
    assert unchanged["response"] == {"uid": UID, "allowed": True}
    worse = tpu_pod(chips="3", topology="2x3")
    introduced = post(client, "/validate", review(worse, "Pod", operation="UPDATE", oldObject=old))
    assert introduced["response"]["auditAnnotations"] == {"violations": "tpu.topology-invalid"}


def test_mutation_is_not_applied_on_update(client: TestClient) -> None:
    pod = tpu_pod()
    del pod["spec"]["containers"][0]["ports"]
    response = post(client, "/mutate", review(pod, "Pod", operation="UPDATE", oldObject=pod))
    assert response["response"] == {"uid": UID, "allowed": True}


def test_delete_and_unknown_kinds_are_allowed(client: TestClient) -> None:
    deleted = post(client, "/validate", review(tpu_pod(chips="3"), "Pod", operation="DELETE"))
    assert deleted["response"] == {"uid": UID, "allowed": True}
    other = post(client, "/validate", review({"metadata": {"name": "x"}}, "ConfigMap"))
    assert other["response"] == {"uid": UID, "allowed": True}
