"""Prometheus metrics of one app instance (its own registry, so tests can build many apps)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from webhook.policy.decide import Verdict
from webhook.policy.workloads import WORKLOADS

KINDS = frozenset({"", *(w.kind for w in WORKLOADS.values())})
OPERATIONS = frozenset({"", "CREATE", "UPDATE", "DELETE", "CONNECT"})
_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "tpu_webhook_requests",
            "Admission reviews answered, by outcome.",
            ["endpoint", "kind", "operation", "outcome"],
            registry=r,
        )
        self.denials = Counter(
            "tpu_webhook_denials",
            "Violations that denied a request, by rule code.",
            ["rule"],
            registry=r,
        )
        self.warnings = Counter(
            "tpu_webhook_warnings",
            "Warnings returned (warn mode included), by rule code.",
            ["rule"],
            registry=r,
        )
        self.patch_operations = Counter(
            "tpu_webhook_patch_operations", "JSON Patch operations returned.", registry=r
        )
        self.latency = Histogram(
            "tpu_webhook_request_duration_seconds",
            "Time to answer an admission review.",
            ["endpoint"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "tpu_webhook_requests_in_flight", "Admission reviews being answered.", registry=r
        )
        self.cert_expiry = Gauge(
            "tpu_webhook_serving_certificate_expiry_timestamp_seconds",
            "Unix time when the serving certificate expires (0 without TLS).",
            registry=r,
        )
        self._requests: dict[tuple[str, str, str, str], Counter] = {}
        self._latency: dict[str, Histogram] = {}

    def observe(
        self,
        endpoint: str,
        kind: str,
        operation: str,
        outcome: str,
        verdict: Verdict | None,
        mode: str,
        seconds: float,
    ) -> None:
        kind = kind if kind in KINDS else "other"  # labels never grow with what clients send
        operation = operation if operation in OPERATIONS else "other"
        key = (endpoint, kind, operation, outcome)
        counter = self._requests.get(key)
        if counter is None:  # labels() takes a lock and builds a key: once per label set
            counter = self._requests[key] = self.requests.labels(*key)
        counter.inc()
        histogram = self._latency.get(endpoint)
        if histogram is None:
            histogram = self._latency[endpoint] = self.latency.labels(endpoint)
        histogram.observe(seconds)
        if verdict is None:
            return
        denials, warnings = verdict.denials, verdict.warnings
        if mode == "warn":
            denials, warnings = (), (*denials, *warnings)
        for v in denials:
            self.denials.labels(v.code).inc()
        for v in warnings:
            self.warnings.labels(v.code).inc()
        if verdict.patch and not denials:
            self.patch_operations.inc(len(verdict.patch))
