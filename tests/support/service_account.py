"""A kubeconfig that acts as a ServiceAccount (a token from the TokenRequest API): a server run
outside the cluster gets exactly the permissions the chart grants its Pod."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from dev.controlplane import ControlPlane


def token_kubeconfig(cp: ControlPlane, account: str, namespace: str, path: Path) -> Path:
    """`path`, written with a one-hour token of `namespace`/`account` (mode 0600)."""
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
