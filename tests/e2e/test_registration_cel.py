"""The matchConditions generator on kinds with several pod specs, some under lists (JobSet,
LeaderWorkerSet, RayCluster shapes), judged by the real API server: a webhook registered with
the generated rules and CEL, pointed at a closed port, is called (and fails) exactly for objects
with a TPU pod spec at any of the paths, and never for the others."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dev.controlplane import ControlPlane
from webhook.registration import Kind, rules, tpu_match_expression

pytestmark = pytest.mark.e2e

GROUP, VERSION = "cel.tpu-webhook.io", "v1"
KINDS = (
    Kind(
        GROUP,
        VERSION,
        "Set",
        "sets",
        (("spec", "replicatedJobs", "*", "template", "spec", "template", "spec"),),
    ),
    Kind(
        GROUP,
        VERSION,
        "LeaderWorker",
        "leaderworkers",
        (
            ("spec", "leaderWorkerTemplate", "leaderTemplate", "spec"),
            ("spec", "leaderWorkerTemplate", "workerTemplate", "spec"),
        ),
    ),
    Kind(
        GROUP,
        VERSION,
        "Cluster",
        "clusters",
        (
            ("spec", "headGroupSpec", "template", "spec"),
            ("spec", "workerGroupSpecs", "*", "template", "spec"),
        ),
    ),
)
TPU_SPEC = {
    "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"},
    "containers": [{"name": "c", "image": "i"}],
}
CHIPS_SPEC = {
    "containers": [{"name": "c", "image": "i"}],
    "initContainers": [{"name": "i", "image": "i", "resources": {"limits": {"google.com/tpu": 4}}}],
}
PLAIN_SPEC = {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": 1}}}]}
NAMESPACE = "cel-kinds"


def crd(kind: Kind) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.resource}.{kind.group}"},
        "spec": {
            "group": kind.group,
            "scope": "Namespaced",
            "names": {"kind": kind.kind, "plural": kind.resource, "singular": kind.kind.lower()},
            "versions": [
                {
                    "name": kind.version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def configuration() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "cel-kinds"},
        "webhooks": [
            {
                "name": "cel-kinds.tpu-webhook.io",
                "clientConfig": {"url": f"https://127.0.0.1:{closed_port()}/validate"},
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 2,
                "rules": [{**r, "operations": ["CREATE"]} for r in rules(KINDS)],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                "matchConditions": [
                    {"name": "tpu-workload", "expression": tpu_match_expression(KINDS)}
                ],
            }
        ],
    }


def apply(cp: ControlPlane, *documents: dict[str, Any]) -> None:
    cp.kubectl("apply", "-f", "-", input="\n".join(json.dumps(d) for d in documents), check=True)


def create(cp: ControlPlane, kind: str, spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    obj = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": f"x-{uuid.uuid4().hex[:6]}"},
        "spec": spec,
    }
    return cp.kubectl(
        "create", "--dry-run=server", "-n", NAMESPACE, "-f", "-", input=json.dumps(obj)
    )


def sent(proc: subprocess.CompletedProcess[str]) -> bool:
    if proc.returncode == 0:
        return False
    assert 'failed calling webhook "cel-kinds.tpu-webhook.io"' in proc.stderr, proc.stderr
    return True


@pytest.fixture(scope="module")
def registered(control_plane: ControlPlane) -> Iterator[None]:
    apply(control_plane, *(crd(k) for k in KINDS))
    for kind in KINDS:
        control_plane.kubectl(
            "wait", "--for=condition=Established", f"crd/{kind.resource}.{kind.group}", check=True
        )
    control_plane.kubectl("create", "namespace", NAMESPACE, check=True)
    apply(control_plane, configuration())
    deadline = time.monotonic() + 60
    while not sent(
        create(
            control_plane,
            "LeaderWorker",
            {"leaderWorkerTemplate": {"workerTemplate": {"spec": TPU_SPEC}}},
        )
    ):
        assert time.monotonic() < deadline, "the configuration never went live"
        time.sleep(0.5)
    yield
    control_plane.kubectl("delete", "validatingwebhookconfiguration", "cel-kinds", check=True)
    control_plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def set_of(*specs: dict[str, Any]) -> dict[str, Any]:
    return {
        "replicatedJobs": [
            {"name": f"r{i}", "template": {"spec": {"template": {"spec": s}}}}
            for i, s in enumerate(specs)
        ]
    }


CASES = [
    ("Set", set_of(PLAIN_SPEC, TPU_SPEC), True),
    ("Set", set_of(PLAIN_SPEC, CHIPS_SPEC), True),
    ("Set", set_of(PLAIN_SPEC, PLAIN_SPEC), False),
    ("Set", {"replicatedJobs": [{"name": "no-template"}, {"template": {"spec": {}}}]}, False),
    ("Set", {"replicatedJobs": []}, False),
    ("Set", {}, False),
    ("LeaderWorker", {"leaderWorkerTemplate": {"leaderTemplate": {"spec": TPU_SPEC}}}, True),
    ("LeaderWorker", {"leaderWorkerTemplate": {"workerTemplate": {"spec": CHIPS_SPEC}}}, True),
    (
        "LeaderWorker",
        {
            "leaderWorkerTemplate": {
                "leaderTemplate": {"spec": PLAIN_SPEC},
                "workerTemplate": {"spec": PLAIN_SPEC},
            }
        },
        False,
    ),
    ("Cluster", {"headGroupSpec": {"template": {"spec": TPU_SPEC}}}, True),
    (
        "Cluster",
        {
            "headGroupSpec": {"template": {"spec": PLAIN_SPEC}},
            "workerGroupSpecs": [
                {"template": {"spec": PLAIN_SPEC}},
                {"template": {"spec": CHIPS_SPEC}},
            ],
        },
        True,
    ),
    (
        "Cluster",
        {
            "headGroupSpec": {"template": {"spec": PLAIN_SPEC}},
            "workerGroupSpecs": [{"template": {"spec": PLAIN_SPEC}}],
        },
        False,
    ),
    ("Cluster", {"workerGroupSpecs": [{"groupName": "no-template"}]}, False),
]


@pytest.mark.parametrize(
    ("kind", "spec", "tpu"), CASES, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(CASES)]
)
def test_tpu_pod_specs_at_any_path_are_sent_and_only_those(
    control_plane: ControlPlane, registered: None, kind: str, spec: dict[str, Any], tpu: bool
) -> None:
    assert sent(create(control_plane, kind, spec)) == tpu
