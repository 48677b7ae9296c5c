"""The plain-number metrics, as Prometheus reads them at a scrape."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from webhook.serving.metrics import BUCKETS, Metrics


def scrape(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_bucket_holds_the_values_up_to_its_bound() -> None:
    metrics = Metrics()
    for seconds in (0.0001, 0.001, 0.0010001, 7.0):
        metrics.observe("mutate", "Pod", "CREATE", "allowed", None, seconds)
    seen = scrape(metrics)

    def bucket(le: str) -> float:
        return seen[
            ("tpu_webhook_request_duration_seconds_bucket", (("endpoint", "mutate"), ("le", le)))
        ]

    assert bucket("0.0002") == 1
    assert bucket("0.001") == 2
    assert bucket("0.002") == 3
    assert bucket("1.0") == 3
    assert bucket("+Inf") == 4
    assert seen[("tpu_webhook_request_duration_seconds_count", (("endpoint", "mutate"),))] == 4
    total = seen[("tpu_webhook_request_duration_seconds_sum", (("endpoint", "mutate"),))]
    assert abs(total - 7.0021001) < 1e-9
    assert len([k for k in seen if k[0].endswith("_bucket")]) == len(BUCKETS) + 1


def test_labels_of_unknown_kinds_and_operations_are_folded() -> None:
    metrics = Metrics()
    for n in range(50):
        metrics.observe("validate", f"Kind{n}", f"OP{n}", "allowed", None, 0.001)
    seen = scrape(metrics)
    labels = (
        ("endpoint", "validate"),
        ("kind", "other"),
        ("operation", "other"),
        ("outcome", "allowed"),
    )
    assert seen[("tpu_webhook_requests_total", labels)] == 50
    assert len([k for k in seen if k[0] == "tpu_webhook_requests_total"]) == 1
