"""The webhook configurations the server prints and the chart renders share one CEL filter."""

from __future__ import annotations

from pathlib import Path

from webhook.configs import tpu_match_expression, url_webhook_configurations
from webhook.policy.workloads import WORKLOADS

CHART_CEL = Path(__file__).resolve().parents[2] / "charts/tpu-webhook/files/tpu-workload.cel"


def test_chart_ships_the_same_match_condition_as_the_server() -> None:
    assert CHART_CEL.read_text() == tpu_match_expression() + "\n"


def test_match_condition_names_every_workload_kind() -> None:
    expression = tpu_match_expression()
    assert all(f"request.kind.kind == '{w.kind}'" in expression for w in WORKLOADS.values())


def test_url_configurations_route_warn_namespaces_to_the_warn_endpoint() -> None:
    mutating, validating = url_webhook_configurations("https://127.0.0.1:9443", "Q0E=")
    assert mutating["webhooks"][0]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate",
        "caBundle": "Q0E=",
    }
    assert mutating["webhooks"][0]["reinvocationPolicy"] == "IfNeeded"
    assert mutating["webhooks"][0]["rules"][0]["operations"] == ["CREATE"]
    enforce, warn = validating["webhooks"]
    assert enforce["clientConfig"]["url"].endswith("/validate")
    assert warn["clientConfig"]["url"].endswith("/validate/warn")
    assert enforce["namespaceSelector"]["matchExpressions"][-1] == {
        "key": "tpu-webhook.io/mode",
        "operator": "NotIn",
        "values": ["warn"],
    }
    assert warn["namespaceSelector"]["matchExpressions"][-1] == {
        "key": "tpu-webhook.io/mode",
        "operator": "In",
        "values": ["warn"],
    }
