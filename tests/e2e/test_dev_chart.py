"""dev/chart.py: the chart's url-mode webhook configurations, rendered by the real helm for a
given base URL and CA, as `make run` registers them (and the e2e suite can)."""

from __future__ import annotations

import base64
import json

import pytest

from dev.chart import NAMESPACE, url_mode_configurations
from dev.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_the_chart_renders_both_configurations_calling_the_given_url_with_the_given_ca() -> None:
    mutating, validating = url_mode_configurations("https://127.0.0.1:9443", CA)
    hooks = mutating["webhooks"] + validating["webhooks"]
    assert (mutating["kind"], validating["kind"]) == (
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    )
    assert [(h["name"], h["clientConfig"]["url"]) for h in hooks] == [
        ("mutate.tpu-webhook.io", "https://127.0.0.1:9443/mutate"),
        ("validate.tpu-webhook.io", "https://127.0.0.1:9443/validate"),
        ("validate-update.tpu-webhook.io", "https://127.0.0.1:9443/validate"),
        ("validate-warn.tpu-webhook.io", "https://127.0.0.1:9443/validate/warn"),
    ]
    assert {base64.b64decode(h["clientConfig"]["caBundle"]) for h in hooks} == {CA}
    excluded = hooks[0]["namespaceSelector"]["matchExpressions"][0]
    assert excluded == {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": ["kube-system", NAMESPACE],
    }


def test_the_api_server_accepts_them(control_plane: ControlPlane) -> None:
    # a release of its own: the suite's registered configurations are named tpu-webhook
    configurations = url_mode_configurations(
        "https://127.0.0.1:9443", control_plane.ca_pem, release="dev-chart"
    )
    manifest = "\n".join(json.dumps(c) for c in configurations)
    applied = control_plane.kubectl("create", "--dry-run=server", "-f", "-", input=manifest)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.splitlines() == [
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/dev-chart-tpu-webhook created "
        "(server dry run)",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/dev-chart-tpu-webhook "
        "created (server dry run)",
    ]
