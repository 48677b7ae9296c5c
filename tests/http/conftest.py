from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from webhook.serving.app import create_app
from webhook.settings import Settings


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = create_app(Settings(max_body_bytes=64 * 1024))
    with TestClient(app) as test_client:
        yield test_client


def review(obj: dict[str, Any], kind: str, group: str = "", **request: Any) -> dict[str, Any]:
    """An AdmissionReview as the API server sends it."""
    body = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
        "operation": "CREATE",
        "namespace": "team-a",
        "name": obj.get("metadata", {}).get("name", ""),
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
    }
    body.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


def tpu_pod(chips: object = "8", topology: str = "2x4", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "infer"},
        "spec": {
            "nodeSelector": {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": topology,
            },
            "containers": [
                {
                    "name": "main",
                    "image": "server",
                    "ports": [{"containerPort": 8471}, {"containerPort": 8431}],
                    "resources": {
                        "requests": {"google.com/tpu": chips},
                        "limits": {"google.com/tpu": chips},
                    },
                }
            ],
            **spec,
        },
    }
