"""Health, readiness and Prometheus metrics."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from tests.http.conftest import review, tpu_pod
from tests.support.catalog_facts import READY
from tests.support.webhook_process import make_certs
from webhook.certificates.create import make_serving_cert, write_pair
from webhook.serving.app import create_app
from webhook.serving.tls import ServingTLS
from webhook.settings import Settings


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_healthz_and_readyz_answer_once_the_catalog_is_loaded(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == READY


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


def test_the_admission_port_serves_no_api_docs(client: TestClient) -> None:
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
        assert client.get(path).status_code == 404, path


def test_the_admission_routes_are_routes_of_the_app_answered_by_their_endpoint() -> None:
    app = create_app(Settings())
    routed = {route.path: route.app for route in app.routes if route.path in app.admission}
    assert routed == app.admission
    assert set(routed) == {"/mutate", "/mutate/warn", "/validate", "/validate/warn"}


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.02)


def test_the_lifespan_runs_the_review_log_flusher_and_flushes_at_shutdown(tmp_path: Path) -> None:
    app = create_app(Settings())
    review_log = app.state.webhook.review_log
    log = tmp_path / "reviews.log"
    review_log.fd = os.open(log, os.O_WRONLY | os.O_CREAT)
    try:
        with TestClient(app) as client:
            client.post("/validate", json=review(tpu_pod(chips="3"), "Pod"))
            wait_until(lambda: b'"uid"' in log.read_bytes())  # written by the flusher task
            client.post("/validate", json=review(tpu_pod(chips="5"), "Pod"))
        assert log.read_bytes().count(b'"uid"') == 2, "the last line is flushed at shutdown"
    finally:
        os.close(review_log.fd)


def test_the_lifespan_runs_the_certificate_watcher(tmp_path: Path) -> None:
    ca = make_certs(tmp_path)
    tls = ServingTLS(tmp_path / "tls.crt", tmp_path / "tls.key")
    app = create_app(Settings(cert_reload_seconds=0.05), tls)
    with TestClient(app):
        write_pair(tmp_path, ca, make_serving_cert(ca, ["localhost"], ["127.0.0.1"]))
        wait_until(lambda: tls.reloads == 1)
    assert app.state.webhook.metrics.cert_expiry == tls.not_after.timestamp()
