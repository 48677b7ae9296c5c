"""The chart's webhook configurations in url mode, rendered by the real helm: what the e2e suite
and the API-server benchmark register, so the configuration tested is the one users install."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from tests.support.controlplane import REPO_ROOT, tools_dir

CHART = REPO_ROOT / "charts" / "tpu-webhook"
URL_VALUES = CHART / "ci" / "url-values.yaml"
CONFIGURATION_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
RELEASE = "tpu-webhook"
NAMESPACE = "tpu-webhook"


def url_mode_configurations(
    base_url: str,
    ca_file: Path,
    sets: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """`helm template` of the chart with ci/url-values.yaml, pointed at `base_url` (a server whose
    certificate `ca_file` signed): its Mutating and Validating WebhookConfigurations."""
    args = [
        "--set",
        f"webhook.url.base={base_url}",
        "--set-file",
        f"webhook.url.caBundle={ca_file}",
    ]
    for key, value in (sets or {}).items():
        args += ["--set", f"{key}={value}"]
    command = [
        str(tools_dir() / "helm"),
        "template",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "-f",
        str(URL_VALUES),
        *args,
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=False, env=env
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm template failed: {done.stderr}")
    documents = YAML(typ="safe", pure=True).load_all(done.stdout)
    return [d for d in documents if d and d.get("kind") in CONFIGURATION_KINDS]
