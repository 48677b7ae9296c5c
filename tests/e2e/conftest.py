"""The webhook as a real `tpu-webhook serve` process, registered with the real API server by the
chart's own webhook configurations (url mode, rendered by the real helm)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from dev.chart import url_mode_configurations, wait_until_live
from dev.controlplane import ControlPlane
from tests.support.webhook_process import WebhookProcess, make_certs


@pytest.fixture(scope="package")
def webhook_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookProcess]:
    certs = tmp_path_factory.mktemp("webhook-certs")
    make_certs(certs)
    with WebhookProcess(certs) as server:
        yield server


def wait_until_denied(
    control_plane: ControlPlane, namespace: str, timeout: float = 60, denied: bool = True
) -> None:
    """Configurations go live (and go away) asynchronously: dry-run a canary until our webhook
    denies it (or, with `denied=False`, until the API server admits it without us)."""
    if not wait_until_live(control_plane, namespace, timeout, live=denied):
        raise AssertionError(f"the webhook configuration never went {'live' if denied else 'away'}")


@pytest.fixture(scope="package")
def registered(
    control_plane: ControlPlane, webhook_server: WebhookProcess
) -> Iterator[list[dict[str, Any]]]:
    """The chart's Mutating and Validating configurations in url mode (`helm template` with
    ci/url-values.yaml, pointed at `webhook_server`), live in the API server while the tests of
    this folder run (removed after them: tests/chart registers its own)."""
    configurations = url_mode_configurations(
        webhook_server.url, webhook_server.ca_file.read_bytes()
    )
    manifest = "\n".join(json.dumps(c) for c in configurations)
    control_plane.kubectl("apply", "-f", "-", input=manifest, check=True)
    try:
        wait_until_denied(control_plane, "default")
        yield configurations
    finally:
        control_plane.kubectl("delete", "-f", "-", input=manifest, check=True)
        wait_until_denied(control_plane, "default", denied=False)


@pytest.fixture(scope="session")
def api(control_plane: ControlPlane) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(control_plane.kubeconfig))


@pytest.fixture
def namespace(control_plane: ControlPlane, registered: list[dict[str, Any]]) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", name, check=True)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false")


def wait_for(predicate: Any, timeout: float = 60, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def seed(name: str) -> Path:
    return Path(__file__).resolve().parent.parent / "seeds" / name
