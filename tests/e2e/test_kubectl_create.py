"""What a user sees: `kubectl create` against a real API server calling tpu-webhook over TLS.

The Job controller of the real kube-controller-manager creates the Pods; there is no scheduler
or kubelet, so Pods stay Pending and only admission-time effects are asserted.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from kubernetes import client
from ruamel.yaml import YAML

from dev.controlplane import ControlPlane
from tests.e2e.conftest import seed, wait_for
from tests.support.webhook_process import WebhookProcess

pytestmark = pytest.mark.e2e

INDEX = "batch.kubernetes.io/job-completion-index"
DENIED = 'admission webhook "validate.tpu-webhook.io" denied the request: '


def load(name: str) -> list[dict[str, Any]]:
    return [d for d in YAML(typ="safe", pure=True).load_all(seed(name).read_text()) if d]


def seed_job() -> dict[str, Any]:
    return next(d for d in load("v4-2x2x4-indexed-job.yaml") if d["kind"] == "Job")


def env_of(container: Any) -> dict[str, Any]:
    return {e.name: e for e in container.env or []}


def job_pods(api: client.ApiClient, namespace: str, job: str, count: int) -> list[Any]:
    core = client.CoreV1Api(api)

    def listed() -> list[Any] | None:
        pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
        return pods if len(pods) == count else None

    pods: list[Any] = wait_for(listed)
    return sorted(pods, key=lambda p: int(p.metadata.annotations[INDEX]))


def test_seed_multi_host_job_is_stored_patched_and_its_pods_get_worker_identity(
    control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    result = control_plane.kubectl(
        "create", "-n", namespace, "-f", str(seed("v4-2x2x4-indexed-job.yaml"))
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "service/headless-svc created",
        "job.batch/tpu-available-chips created",
    ]
    # the seed asks 500Gi of a VM the catalog gives 407G (unconfirmed): a warning, not a denial
    assert "Warning: spec.template.spec.containers[0].resources.requests[memory]" in result.stderr

    job = client.BatchV1Api(api).read_namespaced_job("tpu-available-chips", namespace)
    template = job.spec.template.spec
    assert template.subdomain == "headless-svc"
    env = env_of(template.containers[0])
    assert env["TPU_WORKER_ID"].value_from.field_ref.field_path == (
        f"metadata.annotations['{INDEX}']"
    )
    hostnames = ",".join(f"tpu-available-chips-{i}.headless-svc" for i in range(4))
    assert env["TPU_WORKER_HOSTNAMES"].value == hostnames

    pods = job_pods(api, namespace, "tpu-available-chips", 4)
    assert [p.metadata.annotations[INDEX] for p in pods] == ["0", "1", "2", "3"]
    for index, pod in enumerate(pods):
        container = pod.spec.containers[0]
        env = env_of(container)
        # the kubelet resolves the fieldRef to the Pod's own completion index
        assert env["TPU_WORKER_ID"].value_from.field_ref.field_path == (
            f"metadata.annotations['{INDEX}']"
        )
        assert pod.metadata.annotations[INDEX] == str(index)
        assert env["TPU_WORKER_HOSTNAMES"].value == hostnames
        assert pod.spec.hostname == f"tpu-available-chips-{index}"
        assert pod.spec.subdomain == "headless-svc"
        assert {p.container_port for p in container.ports} == {8471, 8431}
        assert container.resources.limits == container.resources.requests
        assert container.resources.limits["google.com/tpu"] == "4"


def test_job_created_with_generate_name_still_gives_its_pods_the_hostnames(
    control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    job = seed_job()
    job["metadata"] = {"generateName": "train-"}
    result = control_plane.kubectl(
        "create", "-n", namespace, "-o", "name", "-f", "-", input=json.dumps(job)
    )
    assert result.returncode == 0, result.stderr
    name = result.stdout.strip().removeprefix("job.batch/")
    assert re.fullmatch(r"train-[a-z0-9]{5}", name)
    stored = client.BatchV1Api(api).read_namespaced_job(name, namespace)
    template_env = env_of(stored.spec.template.spec.containers[0])
    assert "TPU_WORKER_ID" in template_env
    assert "TPU_WORKER_HOSTNAMES" not in template_env  # the name was not known yet

    hostnames = ",".join(f"{name}-{i}.headless-svc" for i in range(4))
    for pod in job_pods(api, namespace, name, 4):
        env = env_of(pod.spec.containers[0])
        assert env["TPU_WORKER_HOSTNAMES"].value == hostnames
        assert env["TPU_WORKER_ID"].value_from.field_ref.field_path == (
            f"metadata.annotations['{INDEX}']"
        )


def test_generate_name_job_without_subdomain_gets_one_on_its_pods(
    control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    job = seed_job()
    job["metadata"] = {"generateName": "bare-"}
    del job["spec"]["template"]["spec"]["subdomain"]
    result = control_plane.kubectl(
        "create", "-n", namespace, "-o", "name", "-f", "-", input=json.dumps(job)
    )
    assert result.returncode == 0, result.stderr
    name = result.stdout.strip().removeprefix("job.batch/")
    for index, pod in enumerate(job_pods(api, namespace, name, 4)):
        assert pod.spec.subdomain == name
        env = env_of(pod.spec.containers[0])
        assert env["TPU_WORKER_HOSTNAMES"].value == ",".join(f"{name}-{i}.{name}" for i in range(4))
        assert pod.metadata.annotations[INDEX] == str(index)


def test_seed_single_host_pod_is_admitted_and_gets_the_missing_port(
    control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    result = control_plane.kubectl(
        "create", "-n", namespace, "-f", str(seed("v5e-2x4-single-host-pod.yaml"))
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    pod = client.CoreV1Api(api).read_namespaced_pod("tpu-job-jax-v5", namespace)
    container = pod.spec.containers[0]
    assert [(p.name, p.container_port) for p in container.ports] == [
        (None, 8431),
        ("tpu-comm", 8471),
    ]
    assert "TPU_WORKER_ID" not in env_of(container)  # single host: GKE's device plugin sets it


def test_seed_jetstream_deployment_is_admitted_with_tpu_ports_on_the_server(
    control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    result = control_plane.kubectl(
        "create", "-n", namespace, "-f", str(seed("jetstream-deployment.yaml"))
    )
    assert result.returncode == 0, result.stderr
    deployment = client.AppsV1Api(api).read_namespaced_deployment("maxengine-server", namespace)
    server, http = deployment.spec.template.spec.containers
    assert [p.container_port for p in server.ports] == [9000, 8471, 8431]
    assert [p.container_port for p in http.ports] == [8000]


BROKEN: list[tuple[str, Any, str]] = [
    (
        "wrong-chip-count",
        lambda job: job["spec"]["template"]["spec"]["containers"][0]["resources"].update(
            requests={"google.com/tpu": 3}, limits={"google.com/tpu": 3}
        ),
        "spec.template.spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 3: "
        "tpu-v4-podslice 2x2x4 runs 4 chips per host; set requests and limits to 4",
    ),
    (
        "parallelism-not-host-count",
        lambda job: job["spec"].update(parallelism=2),
        "spec.parallelism: Invalid value: 2: 2x2x4 = 16 chips at 4 per host needs 4 hosts; "
        "set spec.parallelism and spec.completions to 4",
    ),
    (
        "invalid-topology",
        lambda job: job["spec"]["template"]["spec"]["nodeSelector"].update(
            {"cloud.google.com/gke-tpu-topology": "2x2x3"}
        ),
        "spec.template.spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Unsupported value: "
        '"2x2x3": tpu-v4-podslice offers 2x2x1, 2x2x2, 2x2x4, 2x4x4',
    ),
    (
        "accelerator-typo",
        lambda job: job["spec"]["template"]["spec"]["nodeSelector"].update(
            {"cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslise"}
        ),
        "spec.template.spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: Unsupported "
        'value: "tpu-v4-podslise": unknown; did you mean "tpu-v4-podslice"?',
    ),
    (
        "chips-without-accelerator",
        lambda job: job["spec"]["template"]["spec"].pop("nodeSelector"),
        "spec.template.spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: Required value: "
        "spec.template.spec.containers[0] requests 4 google.com/tpu chips; set the TPU type",
    ),
]


@pytest.mark.parametrize(("case", "breaks", "message"), BROKEN, ids=[b[0] for b in BROKEN])
@pytest.mark.parametrize("dry_run", [False, True], ids=["create", "dry-run-server"])
def test_broken_job_is_refused_with_the_field_the_numbers_and_the_fix(
    control_plane: ControlPlane,
    api: client.ApiClient,
    namespace: str,
    case: str,
    breaks: Any,
    message: str,
    dry_run: bool,
) -> None:
    job = seed_job()
    job["metadata"]["name"] = f"broken-{case}"
    breaks(job)
    args = ["create", "-n", namespace, "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    result = control_plane.kubectl(*args, input=json.dumps(job))
    assert result.returncode == 1
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if not line.startswith("Warning: ")]
    assert len(errors) == 1
    assert errors[0].startswith(
        f'Error from server (Forbidden): error when creating "STDIN": {DENIED}{message}'
    )
    jobs = client.BatchV1Api(api).list_namespaced_job(namespace).items
    assert [j.metadata.name for j in jobs] == []


def test_chips_requested_without_limits_are_repaired_not_refused(
    control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    job = seed_job()
    del job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    result = control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(job))
    assert result.returncode == 0, result.stderr
    stored = client.BatchV1Api(api).read_namespaced_job("tpu-available-chips", namespace)
    resources = stored.spec.template.spec.containers[0].resources
    # the chips' limit is repaired; cpu and memory keep no limit (the Pod stays Burstable)
    assert resources.requests == {"cpu": "10", "memory": "500Gi", "google.com/tpu": "4"}
    assert resources.limits == {"google.com/tpu": "4"}


def test_unknown_accelerator_is_admitted_with_a_kubectl_warning(
    control_plane: ControlPlane, namespace: str
) -> None:
    pod = load("v5e-2x4-single-host-pod.yaml")[0]
    pod["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] = "tpu-v9-slice"
    result = control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "pod/tpu-job-jax-v5 created\n"
    assert result.stderr.startswith(
        "Warning: spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: Unsupported value: "
        '"tpu-v9-slice": not in this webhook\'s TPU catalog'
    )


def test_dry_run_server_admits_the_seed_and_stores_nothing(
    control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    result = control_plane.kubectl(
        "create",
        "--dry-run=server",
        "-n",
        namespace,
        "-o",
        "json",
        "-f",
        "-",
        input=json.dumps(seed_job()),
    )
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert "TPU_WORKER_HOSTNAMES" in {
        e["name"] for e in shown["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert client.BatchV1Api(api).list_namespaced_job(namespace).items == []


def _reviewed_names(server: WebhookProcess, namespace: str) -> list[str]:
    """Names of the objects of `namespace` that tpu-webhook's review log says it answered."""
    names = []
    for line in server.logs().splitlines():
        entry = json.loads(line) if line.startswith("{") else {}
        if entry.get("msg") == "review" and entry.get("namespace") == namespace:
            names.append(entry["name"])
    return names


def test_non_tpu_pod_is_stored_unchanged_and_never_sent_to_the_webhook(
    control_plane: ControlPlane,
    api: client.ApiClient,
    namespace: str,
    webhook_server: WebhookProcess,
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {
            "containers": [{"name": "web", "image": "nginx", "ports": [{"containerPort": 80}]}]
        },
    }
    result = control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
    assert result.returncode == 0, result.stderr
    stored = client.CoreV1Api(api).read_namespaced_pod("web", namespace)
    assert [(p.container_port, p.name) for p in stored.spec.containers[0].ports] == [(80, None)]
    assert stored.spec.containers[0].env is None
    # A TPU Pod created after it is sent: once its review is logged, any review of "web" (sent
    # before it) would be logged too.
    tpu = json.dumps(load("v5e-2x4-single-host-pod.yaml")[0])
    after = control_plane.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", "-", input=tpu
    )
    assert after.returncode == 0, after.stderr
    tpu_name = load("v5e-2x4-single-host-pod.yaml")[0]["metadata"]["name"]
    names = wait_for(
        lambda: (n := _reviewed_names(webhook_server, namespace)) and tpu_name in n and n
    )
    assert "web" not in names


def test_recreating_a_stored_object_patches_nothing_twice(
    control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    """Re-apply and reinvocation see an object that already has everything: no new operation."""
    first = control_plane.kubectl(
        "create", "-n", namespace, "-o", "json", "-f", str(seed("v5e-2x4-single-host-pod.yaml"))
    )
    assert first.returncode == 0, first.stderr
    stored = json.loads(first.stdout)
    again = copy.deepcopy(stored)
    again["metadata"] = {"name": "second"}
    second = control_plane.kubectl(
        "create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(again)
    )
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["spec"]["containers"] == stored["spec"]["containers"]
    applied = control_plane.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-n",
        namespace,
        "-f",
        str(seed("v5e-2x4-single-host-pod.yaml")),
    )
    assert applied.returncode == 0, applied.stderr
    pod = client.CoreV1Api(api).read_namespaced_pod("tpu-job-jax-v5", namespace)
    ports = [p.container_port for p in pod.spec.containers[0].ports]
    assert sorted(ports) == [8431, 8471]
