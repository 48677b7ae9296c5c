"""Malformed requests get a short JSON error and a 4xx, never a stack trace or a hang."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from tests.http.conftest import review, tpu_pod


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            b"{not json",
            "invalid AdmissionReview: JSON is malformed: object keys must be strings (byte 1)",
        ),
        (b"[1, 2]", "invalid AdmissionReview: Expected `object`, got `array`"),
        (
            b'{"apiVersion": "v1", "kind": "Pod"}',
            "expected kind AdmissionReview, apiVersion one of admission.k8s.io/v1, "
            "admission.k8s.io/v1beta1; got kind 'Pod', apiVersion 'v1'",
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
            "AdmissionReview has no request",
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
            "invalid AdmissionReview: Object missing required field `uid` - at `$.request`",
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
            b'"request": {"uid": 7}}',
            "invalid AdmissionReview: Expected `str`, got `int` - at `$.request.uid`",
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
            b'{"uid": "u", "kind": {"kind": "Pod"}, "object": {"spec": ',
            "invalid AdmissionReview: Input data was truncated",
        ),
    ],
    ids=[
        "not-json",
        "not-an-object",
        "not-a-review",
        "no-request",
        "no-uid",
        "uid-not-string",
        "truncated",
    ],
)
def test_rejects_malformed_reviews_with_400(client: TestClient, body: bytes, error: str) -> None:
    response = client.post("/validate", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json() == {"error": error}


def test_rejects_a_wrong_content_type_with_400(client: TestClient) -> None:
    response = client.post("/mutate", content=b"{}", headers={"content-type": "text/plain"})
    assert response.status_code == 400
    assert response.json() == {"error": "content type must be application/json"}


def test_accepts_a_charset_parameter_on_the_content_type(client: TestClient) -> None:
    response = client.post(
        "/validate",
        content=__import__("orjson").dumps(review(tpu_pod(), "Pod")),
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 200


def test_rejects_a_body_over_the_cap_with_413(client: TestClient) -> None:
    pod = tpu_pod()
    pod["metadata"]["annotations"] = {"big": "x" * 70 * 1024}
    response = client.post("/validate", json=review(pod, "Pod"))
    assert response.status_code == 413
    assert response.json() == {"error": "request body larger than 65536 bytes"}


def test_rejects_a_streamed_body_over_the_cap_without_content_length(client: TestClient) -> None:
    def chunks():  # type: ignore[no-untyped-def]
        for _ in range(80):
            yield b" " * 1024

    response = client.post(
        "/validate", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413


def test_get_on_an_admission_path_is_not_an_admission(client: TestClient) -> None:
    response = client.get("/validate")
    assert response.status_code == 405
