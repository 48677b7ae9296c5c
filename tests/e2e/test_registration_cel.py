"""The matchConditions generator on kinds with several pod specs, some under lists (JobSet,
LeaderWorkerSet, RayCluster shapes), judged by the real API server: a webhook registered with
the generated rules and CEL, pointed at a closed port, is called (and fails) exactly for objects
with a TPU pod spec at any of the paths, and never for the others. And the chart's UPDATE entry
on Pods, Jobs and the real CRDs of JobSet, LeaderWorkerSet and RayCluster: an UPDATE is sent
when it changes the spec, never when it changes only labels, annotations or finalizers."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dev.chart import url_mode_configurations
from dev.controlplane import ControlPlane
from dev.operator_crds import crd_dirs, install_crds
from dev.processes import free_port
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


def configuration() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "cel-kinds"},
        "webhooks": [
            {
                "name": "cel-kinds.tpu-webhook.io",
                "clientConfig": {"url": f"https://127.0.0.1:{free_port()}/validate"},
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


# ------------------------------------------------------------------------------- UPDATE
#
# The chart's own `validate-update.tpu-webhook.io` entry (rendered by helm in url mode, at a
# closed port, with updateFailurePolicy Fail so that a call shows), limited to one namespace.
# Its rules and matchConditions are the chart's: an UPDATE sent fails with 'failed calling
# webhook', one not sent goes through. The namespace carries the opt-out label so that the
# suite's own registration (tests/e2e/conftest.py) stays out of it.

UPDATE_NAMESPACE = "cel-updates"
UPDATE_HOOK = "validate-update.tpu-webhook.io"
TPU_SELECTOR = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
    "cloud.google.com/gke-tpu-topology": "2x4",
}


def tpu_containers(count: int = 1, env: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "name": f"c{i}",
            "image": "i",
            "env": [{"name": f"V{j}", "value": "x" * 40} for j in range(env)],
            "resources": {"limits": {"google.com/tpu": "4"}, "requests": {"google.com/tpu": "4"}},
        }
        for i in range(count)
    ]


def tpu_pod_spec(**more: Any) -> dict[str, Any]:
    return {"nodeSelector": TPU_SELECTOR, "containers": tpu_containers(), **more}


def update_objects() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """By resource: a TPU object of each kind, held (suspended, no replicas) so that no
    controller of the session makes anything from it, and a merge patch that changes its spec
    in a way the API server (and the owner's own webhook, where one is registered) allows."""
    template = {"metadata": {"labels": {"app": "x"}}, "spec": tpu_pod_spec(restartPolicy="Never")}
    # large: 40 worker groups of 8 containers with 20 variables each (about 400 KB)
    groups = [
        {
            "groupName": f"tpu-{g}",
            "replicas": 1,
            "numOfHosts": 2,
            "rayStartParams": {},
            "template": {
                "spec": {"nodeSelector": TPU_SELECTOR, "containers": tpu_containers(8, env=20)}
            },
        }
        for g in range(40)
    ]
    head = {
        "rayStartParams": {},
        "template": {"spec": {"containers": [{"name": "h", "image": "i"}]}},
    }
    return {
        "pod": (
            {"apiVersion": "v1", "kind": "Pod", "spec": tpu_pod_spec()},
            {"spec": {"activeDeadlineSeconds": 600}},
        ),
        "job": (
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "spec": {"suspend": True, "parallelism": 2, "completions": 2, "template": template},
            },
            {"spec": {"parallelism": 1}},
        ),
        "jobset": (
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "spec": {
                    "suspend": True,
                    "replicatedJobs": [
                        {
                            "name": "slice",
                            "replicas": 1,
                            "template": {
                                "spec": {"parallelism": 2, "completions": 2, "template": template}
                            },
                        }
                    ],
                },
            },
            {"spec": {"suspend": False}},
        ),
        "leaderworkerset": (
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "spec": {
                    "replicas": 0,
                    "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": tpu_pod_spec()}},
                },
            },
            {"spec": {"replicas": 1}},
        ),
        "raycluster": (
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "spec": {"suspend": True, "headGroupSpec": head, "workerGroupSpecs": groups},
            },
            # a list is replaced whole by a merge patch: one group's replicas changed
            {"spec": {"workerGroupSpecs": [{**groups[0], "replicas": 2}, *groups[1:]]}},
        ),
    }


def sent_update(proc: subprocess.CompletedProcess[str]) -> bool:
    if proc.returncode == 0:
        return False
    assert f'failed calling webhook "{UPDATE_HOOK}"' in proc.stderr, proc.stderr
    return True


def merge_patch(
    cp: ControlPlane, resource: str, name: str, body: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".json") as patch:  # larger than an argument
        patch.write(json.dumps(body))
        patch.flush()
        return cp.kubectl(
            "patch", "-n", UPDATE_NAMESPACE, resource, name, "--type=merge",
            "--patch-file", patch.name,
        )  # fmt: skip


@pytest.fixture(scope="module")
def update_hook(control_plane: ControlPlane) -> Iterator[None]:
    """The chart's UPDATE entry, live for one namespace (every test's object is made there)."""
    cp = control_plane
    install_crds(cp, crd_dirs().values(), time.monotonic() + 120)
    (validating,) = [
        c
        for c in url_mode_configurations(
            f"https://127.0.0.1:{free_port()}",
            cp.ca_pem,
            release="cel-updates",
            extra_values=[
                "webhook.warnMode.enabled=false",
                "webhook.failurePolicy=Ignore",  # CREATEs: the objects are made first
                "webhook.validating.updateFailurePolicy=Fail",
            ],
        )
        if c["kind"] == "ValidatingWebhookConfiguration"
    ]
    (entry,) = [h for h in validating["webhooks"] if h["name"] == UPDATE_HOOK]
    entry["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": UPDATE_NAMESPACE}}
    entry["timeoutSeconds"] = 2
    validating["webhooks"] = [entry]
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": UPDATE_NAMESPACE, "labels": {"tpu-webhook.io/ignore": "true"}},
    }
    apply(cp, namespace)
    canary, _ = update_objects()["job"]
    canary["metadata"] = {"name": "canary"}
    cp.kubectl("create", "-n", UPDATE_NAMESPACE, "-f", "-", input=json.dumps(canary), check=True)
    apply(cp, validating)
    try:
        # live once a spec change of the canary is sent (each try changes it)
        deadline = time.monotonic() + 60
        tries = 0
        while not sent_update(
            merge_patch(cp, "job", "canary", {"spec": {"parallelism": tries % 2 + 1}})
        ):
            assert time.monotonic() < deadline, "the configuration never went live"
            tries += 1
            time.sleep(0.5)
        yield
    finally:
        cp.kubectl(
            "delete", "validatingwebhookconfiguration", "cel-updates-tpu-webhook", check=True
        )
        cp.kubectl("delete", "namespace", UPDATE_NAMESPACE, "--wait=false")


@pytest.mark.parametrize("resource", sorted(update_objects()))
def test_an_update_is_sent_when_it_changes_the_spec_and_never_when_it_changes_metadata(
    control_plane: ControlPlane, update_hook: None, resource: str
) -> None:
    cp = control_plane
    obj, patch = update_objects()[resource]
    name = f"{resource}-{uuid.uuid4().hex[:6]}"
    obj["metadata"] = {"name": name}
    created = cp.kubectl("create", "-n", UPDATE_NAMESPACE, "-f", "-", input=json.dumps(obj))
    assert created.returncode == 0, created.stderr
    at = ["-n", UPDATE_NAMESPACE, resource, name]

    assert sent_update(merge_patch(cp, resource, name, patch))
    # metadata only: never sent, whatever the object is
    assert not sent_update(cp.kubectl("label", *at, "team=a"))
    assert not sent_update(cp.kubectl("annotate", *at, "note=x"))
    held = {"metadata": {"finalizers": ["example.com/hold"]}}
    assert not sent_update(merge_patch(cp, resource, name, held))
    assert not sent_update(merge_patch(cp, resource, name, {"metadata": {"finalizers": None}}))
    # and the spec again, after all of them: still sent
    assert sent_update(merge_patch(cp, resource, name, patch))
