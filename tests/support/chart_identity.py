"""The chart's own identity for a server run outside the cluster: its ServiceAccount and
read-only RBAC as `helm template` renders them, and a kubeconfig with a token of that account,
so a `tpu-webhook serve` process calls the API server with exactly the chart's permissions."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dev.chart import _template
from dev.controlplane import ControlPlane

RBAC_KINDS = frozenset(
    {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
)


def chart_rbac(release: str, namespace: str, values: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The chart's ServiceAccount and its RBAC objects (default values, plus `--set` `values`)."""
    rendered = _template(
        None, release, namespace, ["--set", "image.repository=example.com/tpu-webhook", *values]
    )
    return [o for o in rendered if o.get("kind") in RBAC_KINDS]


def token_kubeconfig(cp: ControlPlane, account: str, namespace: str, path: Path) -> Path:
    """A kubeconfig (mode 0600) that calls `cp` with an hour's token of the ServiceAccount."""
    token = cp.kubectl(
        "create", "token", account, "-n", namespace, "--duration=1h", check=True
    ).stdout.strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {
                    "server": cp.server,
                    "certificate-authority-data": base64.b64encode(cp.ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": "sa"}}],
        "current-context": "sa",
    }
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path
