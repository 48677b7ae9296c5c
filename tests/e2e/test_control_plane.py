"""Smoke test of the real control plane: versions, the Job controller, helm."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from kubernetes import client, config

from dev.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

K8S_VERSION = "v1.35.4"


def test_kubectl_reports_server_version(control_plane: ControlPlane) -> None:
    out = control_plane.kubectl("version", "-o", "json", check=True).stdout
    versions = json.loads(out)
    assert versions["serverVersion"]["gitVersion"] == K8S_VERSION
    assert versions["clientVersion"]["gitVersion"] == K8S_VERSION
    assert control_plane.version == K8S_VERSION


def test_indexed_job_creates_pods_with_index_and_hostname(control_plane: ControlPlane) -> None:
    ns = f"smoke-{uuid.uuid4().hex[:8]}"
    job = "indexed"
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job, "namespace": ns},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"]}],
                }
            },
        },
    }
    control_plane.kubectl("create", "namespace", ns, check=True)
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(manifest), check=True)

    api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(control_plane.kubeconfig)
    )
    api = client.CoreV1Api(api_client)
    pods: list[Any] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pods = api.list_namespaced_pod(ns, label_selector=f"job-name={job}").items
        if len(pods) >= 2:
            break
        time.sleep(0.5)
    by_index = {p.metadata.annotations["batch.kubernetes.io/job-completion-index"]: p for p in pods}
    assert sorted(by_index) == ["0", "1"], [p.metadata.name for p in pods]
    for index, pod in by_index.items():
        assert pod.spec.hostname == f"{job}-{index}"
        assert pod.spec.subdomain is None  # no Service given: the controller sets none
        assert pod.status.phase == "Pending"  # no scheduler, no kubelet
        assert pod.spec.service_account_name == "default"
    control_plane.kubectl("delete", "namespace", ns, "--wait=false", check=True)


def test_helm_version(control_plane: ControlPlane) -> None:
    out = control_plane.helm("version", "--template", "{{.Version}}", check=True).stdout
    assert out.startswith("v3.20.")
