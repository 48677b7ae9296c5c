"""Prometheus metrics of one app instance (its own registry, so tests can build many apps).

A review updates plain ints and floats; the Prometheus families are built only when /metrics is
scraped. prometheus_client's Counter and Histogram take a lock per update, which costs more than
the update itself, and the event loop is a single thread: every update and every scrape run on
it, one at a time.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from webhook.admission.dispatch import Endpoint
from webhook.policy.decide import Verdict
from webhook.policy.workloads import WORKLOADS

KINDS = frozenset({"", *(w.kind for w in WORKLOADS.values())})
OPERATIONS = frozenset({"", "CREATE", "UPDATE", "DELETE", "CONNECT"})
BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
REQUEST_LABELS = ("endpoint", "kind", "operation", "outcome")


class Histogram:
    """Counts per bucket (the last one +Inf), and the sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1  # a bucket holds values <= its bound
        self.total += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        bounds = [*(repr(b) for b in BUCKETS), "+Inf"]
        running, out = 0, []
        for bound, count in zip(bounds, self.counts, strict=True):
            running += count
            out.append((bound, float(running)))
        return out


class Metrics:
    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str, str], int] = {}
        self.denials: dict[str, int] = {}
        self.warnings: dict[str, int] = {}
        self.patch_operations = 0
        self.latency: dict[str, Histogram] = {}
        self.in_flight = 0
        self.cert_expiry = 0.0
        # objects of each kind the cluster watcher holds (None: it does not run)
        self.cluster_objects: Callable[[], dict[str, int]] | None = None
        # (result, rule, outcome) -> findings of the owner-event recorder (None: it does not run)
        self.owner_events: Callable[[], dict[tuple[str, str, str], int]] | None = None
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(self)

    def observe(
        self,
        endpoint: Endpoint,
        kind: str,
        operation: str,
        outcome: str,
        answered: Verdict | None,
        seconds: float,
    ) -> None:
        """One review: `answered` is the verdict as the API server was told it (`in_mode`)."""
        kind = kind if kind in KINDS else "other"  # labels never grow with what clients send
        operation = operation if operation in OPERATIONS else "other"
        key = (endpoint, kind, operation, outcome)
        self.requests[key] = self.requests.get(key, 0) + 1
        histogram = self.latency.get(endpoint)
        if histogram is None:
            histogram = self.latency[endpoint] = Histogram()
        histogram.observe(seconds)
        if answered is None or not (answered.denials or answered.warnings or answered.patch):
            return
        for v in answered.denials:
            self.denials[v.code] = self.denials.get(v.code, 0) + 1
        for v in answered.warnings:
            self.warnings[v.code] = self.warnings.get(v.code, 0) + 1
        if answered.patch and not answered.denials:
            self.patch_operations += len(answered.patch)

    def collect(self) -> Iterator[Metric]:
        """The families, as prometheus_client's registry asks a custom collector for them."""
        requests = CounterMetricFamily(
            "tpu_webhook_requests", "Admission reviews answered, by outcome.", labels=REQUEST_LABELS
        )
        for key, count in sorted(self.requests.items()):
            requests.add_metric(key, count)
        yield requests
        yield _by_rule(
            "tpu_webhook_denials", "Violations that denied a request, by rule code.", self.denials
        )
        yield _by_rule(
            "tpu_webhook_warnings",
            "Warnings returned (warn mode included), by rule code.",
            self.warnings,
        )
        yield CounterMetricFamily(
            "tpu_webhook_patch_operations",
            "JSON Patch operations returned.",
            value=self.patch_operations,
        )
        latency = HistogramMetricFamily(
            "tpu_webhook_request_duration_seconds",
            "Time to answer an admission review.",
            labels=("endpoint",),
        )
        for endpoint, histogram in sorted(self.latency.items()):
            latency.add_metric((endpoint,), histogram.cumulative(), histogram.total)
        yield latency
        yield GaugeMetricFamily(
            "tpu_webhook_requests_in_flight",
            "Admission reviews being answered.",
            value=self.in_flight,
        )
        if self.cluster_objects is not None:
            held = GaugeMetricFamily(
                "tpu_webhook_cluster_objects",
                "Objects of each kind read from the cluster for decisions.",
                labels=("kind",),
            )
            for kind, count in sorted(self.cluster_objects().items()):
                held.add_metric((kind,), count)
            yield held
        if self.owner_events is not None:
            events = CounterMetricFamily(
                "tpu_webhook_owner_events",
                "Findings on objects controllers made, as Events on their owner: recorded (a new "
                "Event), correlated (counted into one), dropped (rate limit, full queue), failed.",
                labels=("result", "rule", "outcome"),
            )
            for labels, count in sorted(self.owner_events().items()):
                events.add_metric(labels, count)
            yield events
        yield GaugeMetricFamily(
            "tpu_webhook_serving_certificate_expiry_timestamp_seconds",
            "Unix time when the serving certificate expires (0 without TLS).",
            value=self.cert_expiry,
        )


def _by_rule(name: str, documentation: str, counts: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=("rule",))
    for rule, count in sorted(counts.items()):
        family.add_metric((rule,), count)
    return family
