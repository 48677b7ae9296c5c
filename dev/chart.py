"""The chart's webhook configurations in url mode, rendered by the real helm.

`make run` and the e2e suite register the webhook exactly as the chart does when the API server
calls a server outside the cluster (values as in charts/tpu-webhook/ci/url-values.yaml, with the
base URL and CA of the server at hand), so what they show is what an install does.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dev.controlplane import ControlPlane
from dev.tools import REPO_ROOT, tools_dir
from webhook.manifests import objects_in

CHART = REPO_ROOT / "charts" / "tpu-webhook"
URL_VALUES = CHART / "ci" / "url-values.yaml"
RELEASE = NAMESPACE = "tpu-webhook"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class ChartError(RuntimeError):
    """helm could not render the chart."""


def url_mode_configurations(
    base_url: str,
    ca_pem: bytes,
    *,
    helm: Path | None = None,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    extra_values: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The chart's Mutating and Validating WebhookConfigurations calling `base_url`
    (e.g. https://127.0.0.1:8443) with `ca_pem` as their caBundle. `extra_values` are more
    `--set` arguments (key=value)."""
    with tempfile.TemporaryDirectory(prefix="tpu-webhook-ca-") as scratch:
        ca_file = Path(scratch) / "ca.crt"
        ca_file.write_bytes(ca_pem)
        rendered = _template(
            helm,
            release,
            namespace,
            [
                "--values", str(URL_VALUES),
                "--set", f"webhook.url.base={base_url}",
                "--set-file", f"webhook.url.caBundle={ca_file}",
                *(arg for value in extra_values for arg in ("--set", value)),
            ],
        )  # fmt: skip
    configurations = [obj for obj in rendered if obj.get("kind") in WEBHOOK_KINDS]
    if [c["kind"] for c in configurations] != list(WEBHOOK_KINDS):
        raise ChartError(f"helm template rendered {[o.get('kind') for o in rendered]}")
    return configurations


def server_environment(
    extra_values: Sequence[str] = (), *, helm: Path | None = None
) -> dict[str, str]:
    """The TPU_WEBHOOK_* variables the chart's Deployment gives the server for `extra_values`
    (`--set` key=value), by name: what a server outside the cluster needs to decide as the
    chart's would."""
    rendered = _template(
        helm,
        RELEASE,
        NAMESPACE,
        [
            "--set", "image.repository=tpu-webhook.invalid/render-only",
            *(arg for value in extra_values for arg in ("--set", value)),
        ],
    )  # fmt: skip
    (deployment,) = [obj for obj in rendered if obj.get("kind") == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("TPU_WEBHOOK_")}


def _template(
    helm: Path | None, release: str, namespace: str, args: Sequence[str]
) -> list[dict[str, Any]]:
    """`helm template` of the chart with `args`, with throw-away helm state and no cluster."""
    helm = helm or tools_dir() / "helm"
    with tempfile.TemporaryDirectory(prefix="tpu-webhook-helm-") as scratch:
        home = Path(scratch)
        command = [
            str(helm), "template", release, str(CHART), "--namespace", namespace, *args
        ]  # fmt: skip
        env = {
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
            "KUBECONFIG": str(home / "no-kubeconfig"),  # template never talks to a cluster
            "PATH": "/usr/bin:/bin",
        }
        proc = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=60, check=False
        )
    if proc.returncode != 0:
        raise ChartError(f"helm template failed: {proc.stderr.strip()}")
    return [dict(obj) for _, obj in objects_in(proc.stdout, "helm template")]


# A TPU Pod only tpu-webhook refuses (v5e offers no 2x3): registration goes live asynchronously.
CANARY = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "tpu-webhook-canary"},
    "spec": {
        "nodeSelector": {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "2x3",
        },
        "containers": [{"name": "c", "image": "busybox"}],
    },
}


def wait_until_live(
    control_plane: ControlPlane, namespace: str = "default", timeout: float = 60, live: bool = True
) -> bool:
    """Dry-run the canary until tpu-webhook denies it (or, with `live=False`, until the API
    server admits it without us); False when `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = control_plane.kubectl(
            "create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(CANARY)
        )
        ours = "tpu.topology-invalid" in result.stderr or "offers 1x1" in result.stderr
        if ours if live else result.returncode == 0:
            return True
        time.sleep(0.5)
    return False
