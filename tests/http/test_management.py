"""Health, readiness and Prometheus metrics."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from tests.http.conftest import review, tpu_pod
from webhook.serving.app import create_app
from webhook.settings import Settings


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_healthz_and_readyz_answer_once_the_catalog_is_loaded(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok", "certificate": True, "catalog": 6}


def test_metrics_count_what_was_sent() -> None:
    with TestClient(create_app(Settings())) as client:
        bad = tpu_pod(chips="3")
        patchable = tpu_pod()
        del patchable["spec"]["containers"][0]["ports"]
        for _ in range(3):
            client.post("/validate", json=review(bad, "Pod"))
        client.post("/validate/warn", json=review(bad, "Pod"))
        client.post("/mutate", json=review(patchable, "Pod"))
        client.post("/mutate", content=b"nope", headers={"content-type": "application/json"})
        seen = samples(client.get("/metrics").text)

    def requests(endpoint: str, kind: str, operation: str, outcome: str) -> float:
        labels = (
            ("endpoint", endpoint),
            ("kind", kind),
            ("operation", operation),
            ("outcome", outcome),
        )
        return seen[("tpu_webhook_requests_total", labels)]

    assert requests("validate", "Pod", "CREATE", "denied") == 3
    assert requests("validate", "Pod", "CREATE", "warned") == 1
    assert requests("mutate", "Pod", "CREATE", "patched") == 1
    assert requests("mutate", "", "", "invalid") == 1
    assert seen[("tpu_webhook_denials_total", (("rule", "tpu.chips-per-host"),))] == 3
    assert seen[("tpu_webhook_warnings_total", (("rule", "tpu.chips-per-host"),))] == 1
    assert seen[("tpu_webhook_patch_operations_total", ())] == 1  # one add of the ports list
    assert seen[("tpu_webhook_requests_in_flight", ())] == 0
    assert seen[("tpu_webhook_request_duration_seconds_count", (("endpoint", "validate"),))] == 4
    assert seen[("tpu_webhook_serving_certificate_expiry_timestamp_seconds", ())] == 0
