"""The chart installed with helm into a one-node cluster whose kubelet runs its Pods.

`cluster_node` (tests/support/node.py) is a control plane, containerd and a kubelet labelled as
a TPU v4 2x2x4 node with 16 `google.com/tpu`; the image built from the Dockerfile is imported
into containerd. The API server reaches the webhook through its Service (endpoints, no
kube-proxy). Scenarios, with kubectl as a user types it:

- the webhook Pods become Ready as uid 65532 on a read-only root, with the system-cluster-critical
  priority that the chart's ResourceQuota admits outside kube-system;
- the seed Job (tests/seeds, with a tiny image that prints its environment) runs: the kubelet
  resolves TPU_WORKER_ID 0..3 from the completion-index annotation the webhook pointed it to;
- a rolling update, and the deletion of one webhook Pod, while a client creates TPU Pods in a
  loop: no create fails (PDB, preStop, readiness).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from ruamel.yaml import YAML

from tests.support.image import BuiltImage
from tests.support.node import NODE_NAME, PRINTENV_IMAGE, TPU_LABELS, ClusterNode

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tpu-webhook"
SEED = ROOT / "tests" / "seeds" / "v4-2x2x4-indexed-job.yaml"
RELEASE, SYSTEM = "tpu", "tpu-webhook-system"
DEPLOYMENT = f"{RELEASE}-tpu-webhook"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
WORKLOADS, LOAD = "tpu-workloads", "tpu-load"
SCENARIO_TIMEOUT_S = 300
#: The create loop's pace: steady load without starving 2 cores shared with the cluster.
LOOP_INTERVAL_S = 0.05
SETTLE_S = 3.0  # the loop keeps going this long after the change has completed

pytestmark = [pytest.mark.e2e, pytest.mark.debian, pytest.mark.timeout(SCENARIO_TIMEOUT_S + 300)]


def kubectl_ok(
    node: ClusterNode, *args: str, input: str | None = None, timeout: float = 120
) -> str:
    proc = node.kubectl(*args, input=input, timeout=timeout)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}:\n{proc.stderr}"
    return proc.stdout


def get_json(node: ClusterNode, *args: str) -> Any:
    return json.loads(kubectl_ok(node, "get", *args, "-o", "json"))


def webhook_pods(node: ClusterNode) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = get_json(node, "pods", "-n", SYSTEM, "-l", SELECTOR)["items"]
    return pods


def ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
    return conditions.get("Ready") == "True" and "deletionTimestamp" not in pod["metadata"]


def seed_objects() -> tuple[dict[str, Any], dict[str, Any]]:
    """The seed's Service and Job; the Job runs the printenv image, sized for this node.

    Only what cannot run here changes: the image (python:3.10 and pip need a registry), its
    command, and cpu/memory (10 CPU and 500Gi per Pod do not fit a 2-core node). The TPU
    selectors, chip counts, ports, completions and subdomain are the seed's.
    """
    docs = [d for d in YAML(typ="safe", pure=True).load_all(SEED.read_text()) if d]
    service = next(d for d in docs if d["kind"] == "Service")
    job = next(d for d in docs if d["kind"] == "Job")
    (main,) = job["spec"]["template"]["spec"]["containers"]
    main.update(image=PRINTENV_IMAGE, imagePullPolicy="Never", command=["/printenv"])
    for part in ("requests", "limits"):
        main["resources"][part].update(cpu="100m", memory="32Mi")
    return service, job


def wait_default_service_account(node: ClusterNode, namespace: str) -> None:
    node.wait_for(
        f"ServiceAccount {namespace}/default",
        lambda: node.kubectl("get", "sa", "default", "-n", namespace).returncode == 0,
    )


@pytest.fixture(scope="module")
def installed(
    cluster_node: ClusterNode, built_image: BuiltImage, node_figures: dict[str, str]
) -> Iterator[ClusterNode]:
    """`helm install` of the chart with the imported image; returns once the webhook answers."""
    node = cluster_node
    began = time.monotonic()
    kubectl_ok(node, "create", "namespace", SYSTEM)
    out = node.helm(
        "install",
        RELEASE,
        str(CHART),
        "-n",
        SYSTEM,
        "--set",
        f"image.repository={built_image.repository}",
        "--set",
        f"image.tag={built_image.tag}",
        "--set",
        "image.pullPolicy=Never",
    )
    assert out.returncode == 0, out.stderr
    kubectl_ok(
        node, "-n", SYSTEM, "rollout", "status", f"deployment/{DEPLOYMENT}", "--timeout=180s",
        timeout=200,
    )  # fmt: skip
    node_figures["helm install -> rollout complete"] = f"{time.monotonic() - began:.1f} s"
    for namespace in (WORKLOADS, LOAD):
        kubectl_ok(node, "create", "namespace", namespace)
        wait_default_service_account(node, namespace)
    _, job = seed_objects()

    def patched() -> bool:  # configurations go live asynchronously
        proc = node.kubectl(
            "create", "--dry-run=server", "-n", WORKLOADS, "-o", "json", "-f", "-",
            input=json.dumps(job),
        )  # fmt: skip
        if proc.returncode != 0:
            return False
        env = json.loads(proc.stdout)["spec"]["template"]["spec"]["containers"][0].get("env")
        return bool(env)

    node.wait_for("the webhook to answer through its Service", patched, timeout=60)
    node_figures["helm install -> webhook answers"] = f"{time.monotonic() - began:.1f} s"
    yield node
    node.helm("uninstall", RELEASE, "-n", SYSTEM)  # the node's teardown deletes what is left


# ----------------------------------------------------------------------------- the Pods


def seconds_to_ready(pod: dict[str, Any]) -> float:
    """From the container's start to the Pod's Ready condition (the API's 1 s resolution)."""
    (status,) = pod["status"]["containerStatuses"]
    started = dt.datetime.fromisoformat(status["state"]["running"]["startedAt"])
    (ready_at,) = [
        c["lastTransitionTime"] for c in pod["status"]["conditions"] if c["type"] == "Ready"
    ]
    return (dt.datetime.fromisoformat(ready_at) - started).total_seconds()


def test_webhook_pods_become_ready_as_non_root_with_a_read_only_root(
    installed: ClusterNode, node_figures: dict[str, str]
) -> None:
    pods = webhook_pods(installed)
    node_figures["webhook Pods: container start -> Ready"] = ", ".join(
        f"{seconds_to_ready(p):.0f} s" for p in pods
    )
    assert len(pods) == 2
    assert all(ready(p) for p in pods)
    assert {p["spec"]["nodeName"] for p in pods} == {NODE_NAME}
    assert {p["spec"]["priorityClassName"] for p in pods} == {"system-cluster-critical"}
    assert all(p["spec"]["priority"] == 2000000000 for p in pods)
    for pod in pods:
        name = pod["metadata"]["name"]
        ids = kubectl_ok(installed, "exec", "-n", SYSTEM, name, "--", "sh", "-c", "id -u; id -g")
        assert ids.split() == ["65532", "65532"]
        write = installed.kubectl("exec", "-n", SYSTEM, name, "--", "touch", "/opt/venv/x")
        assert write.returncode != 0
        assert "Read-only file system" in write.stderr
    quota = get_json(installed, "resourcequota", "-n", SYSTEM)["items"]
    (critical,) = quota
    assert critical["status"]["used"]["pods"] == "2"


def test_the_api_server_calls_the_webhook_through_its_service(installed: ClusterNode) -> None:
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        for entry in get_json(installed, kind, DEPLOYMENT)["webhooks"]:
            assert entry["clientConfig"]["service"]["name"] == DEPLOYMENT
            assert entry["clientConfig"]["service"]["namespace"] == SYSTEM
            assert "url" not in entry["clientConfig"]
    slices = get_json(
        installed, "endpointslices", "-n", SYSTEM, "-l", f"kubernetes.io/service-name={DEPLOYMENT}"
    )["items"]
    served = {a for s in slices for e in s["endpoints"] for a in e["addresses"]}
    assert served == {p["status"]["podIP"] for p in webhook_pods(installed)}
    # The Service's ClusterIP does not route here (no kube-proxy): the API server resolves the
    # Service to these endpoints itself (--enable-aggregator-routing), as a patched dry run shows.
    _, job = seed_objects()
    proc = installed.kubectl(
        "create", "--dry-run=server", "-n", WORKLOADS, "-o", "json", "-f", "-",
        input=json.dumps(job),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    env = json.loads(proc.stdout)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == ["TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"]


def test_critical_pods_are_refused_in_a_namespace_without_the_quota(
    installed: ClusterNode,
) -> None:
    # The control plane limits system-* priority classes as GKE does: what the chart's
    # ResourceQuota is for.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "critical"},
        "spec": {
            "priorityClassName": "system-cluster-critical",
            "containers": [{"name": "c", "image": PRINTENV_IMAGE, "imagePullPolicy": "Never"}],
        },
    }
    proc = installed.kubectl("create", "-n", WORKLOADS, "-f", "-", input=json.dumps(pod))
    assert proc.returncode != 0
    assert "insufficient quota to match these scopes" in proc.stderr


def test_the_node_advertises_tpus(installed: ClusterNode) -> None:
    node = get_json(installed, "node", NODE_NAME)
    assert node["status"]["capacity"]["google.com/tpu"] == "16"
    assert node["status"]["allocatable"]["google.com/tpu"] == "16"
    for key, value in TPU_LABELS.items():
        assert node["metadata"]["labels"][key] == value


def test_seed_job_runs_with_worker_ids_resolved_by_the_kubelet(
    installed: ClusterNode, node_figures: dict[str, str]
) -> None:
    service, job = seed_objects()
    name = job["metadata"]["name"]
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": [service, job]})
    began = time.monotonic()
    kubectl_ok(installed, "apply", "-n", WORKLOADS, "-f", "-", input=manifest)
    kubectl_ok(
        installed, "wait", "-n", WORKLOADS, "--for=condition=Complete", f"job/{name}",
        "--timeout=180s", timeout=200,
    )  # fmt: skip
    node_figures["seed Job: apply -> Complete (4 Pods)"] = f"{time.monotonic() - began:.1f} s"
    pods = get_json(installed, "pods", "-n", WORKLOADS, "-l", f"job-name={name}")["items"]
    assert len(pods) == 4
    hostnames = ",".join(f"{name}-{i}.headless-svc" for i in range(4))
    printed_ids = []
    for pod in pods:
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        (main,) = pod["spec"]["containers"]
        worker_id = next(e for e in main["env"] if e["name"] == "TPU_WORKER_ID")
        assert "value" not in worker_id  # the webhook set a reference, the kubelet resolved it
        assert worker_id["valueFrom"]["fieldRef"]["fieldPath"] == (
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        )
        assert sorted(p["containerPort"] for p in main["ports"]) == [8431, 8471]
        assert main["resources"]["limits"]["google.com/tpu"] == "4"
        printed = kubectl_ok(installed, "logs", "-n", WORKLOADS, pod["metadata"]["name"])
        env = dict(line.split("=", 1) for line in printed.splitlines() if "=" in line)
        assert env["TPU_WORKER_ID"] == index
        assert env["TPU_WORKER_HOSTNAMES"] == hostnames
        assert env["hostname"] == f"{name}-{index}"
        printed_ids.append(env["TPU_WORKER_ID"])
    assert sorted(printed_ids) == ["0", "1", "2", "3"]


# --------------------------------------------------------------- availability under change


@dataclass
class CreateLoop:
    """Creates TPU Pods one after another until stopped; records every failure."""

    api: client.CoreV1Api
    attempts: int = 0
    failures: list[str] = field(default_factory=list)
    unpatched: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @staticmethod
    def pod() -> dict[str, Any]:
        # A single-host v5e Pod without ports: valid, so the webhook admits it and adds the TPU
        # ports (a create that skipped the webhook would come back without them). It names a
        # scheduler that does not exist, so it stays Pending without loading the 2-core node.
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "loop-"},
            "spec": {
                "schedulerName": "e2e-not-scheduled",
                "nodeSelector": {
                    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                    "cloud.google.com/gke-tpu-topology": "2x4",
                },
                "containers": [
                    {
                        "name": "main",
                        "image": PRINTENV_IMAGE,
                        "resources": {"limits": {"google.com/tpu": "8"}},
                    }
                ],
            },
        }

    def run(self) -> None:
        while not self._stop.is_set():
            self.attempts += 1
            try:
                created = self.api.create_namespaced_pod(LOAD, self.pod())
            except Exception as exc:  # every failure is the finding, whatever its type
                self.failures.append(f"{time.strftime('%H:%M:%S')} {exc}")
            else:
                ports = created.spec.containers[0].ports or []
                if 8471 not in {p.container_port for p in ports}:  # the webhook adds the ports
                    self.unpatched += 1
            self._stop.wait(LOOP_INTERVAL_S)

    def __enter__(self) -> CreateLoop:
        self._thread = threading.Thread(target=self.run, name="create-loop", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


@pytest.fixture
def create_loop(installed: ClusterNode) -> Iterator[CreateLoop]:
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(installed.cp.kubeconfig)))
    loop = CreateLoop(api)
    yield loop
    installed.kubectl("delete", "pods", "--all", "-n", LOAD, "--wait=false")


def wait_for_two_ready_pods_only(node: ClusterNode, exclude: set[str]) -> set[str]:
    def settled() -> set[str] | None:
        pods = webhook_pods(node)
        names = {p["metadata"]["name"] for p in pods}
        if len(pods) == 2 and all(ready(p) for p in pods) and not names & exclude:
            return names
        return None

    result: set[str] = node.wait_for("two new Ready webhook Pods", settled, SCENARIO_TIMEOUT_S)
    return result


def test_rolling_update_under_a_create_loop_loses_no_create(
    installed: ClusterNode, create_loop: CreateLoop, node_figures: dict[str, str]
) -> None:
    before = {p["metadata"]["name"] for p in webhook_pods(installed)}
    began = time.monotonic()
    with create_loop as loop:
        time.sleep(SETTLE_S)
        kubectl_ok(installed, "-n", SYSTEM, "rollout", "restart", f"deployment/{DEPLOYMENT}")
        kubectl_ok(
            installed, "-n", SYSTEM, "rollout", "status", f"deployment/{DEPLOYMENT}",
            "--timeout=240s", timeout=260,
        )  # fmt: skip
        after = wait_for_two_ready_pods_only(installed, exclude=before)
        time.sleep(SETTLE_S)
    node_figures["rolling update: creates attempted / failed / unpatched"] = (
        f"{loop.attempts} / {len(loop.failures)} / {loop.unpatched}"
        f" in {time.monotonic() - began:.1f} s"
    )
    assert not after & before
    assert loop.failures == []
    assert loop.unpatched == 0
    assert loop.attempts > 50


def test_deleting_a_webhook_pod_under_a_create_loop_loses_no_create(
    installed: ClusterNode, create_loop: CreateLoop, node_figures: dict[str, str]
) -> None:
    (victim, *_) = sorted(p["metadata"]["name"] for p in webhook_pods(installed))
    began = time.monotonic()
    with create_loop as loop:
        time.sleep(SETTLE_S)
        kubectl_ok(installed, "-n", SYSTEM, "delete", "pod", victim, "--timeout=120s")
        wait_for_two_ready_pods_only(installed, exclude={victim})
        time.sleep(SETTLE_S)
    node_figures["pod deletion: creates attempted / failed / unpatched"] = (
        f"{loop.attempts} / {len(loop.failures)} / {loop.unpatched}"
        f" in {time.monotonic() - began:.1f} s"
    )
    assert loop.failures == []
    assert loop.unpatched == 0
    assert loop.attempts > 50


def test_the_loop_sees_an_outage_one_replica_without_pre_stop(
    installed: ClusterNode, create_loop: CreateLoop, node_figures: dict[str, str]
) -> None:
    """Negative control: the zero failures above are the chart's doing, not a blind loop.

    One replica and no preStop sleep: the deleted Pod stops serving at once and the new one is
    not Ready yet, so the API server has no endpoint and (failurePolicy Fail) refuses creates.
    """
    kubectl_ok(
        installed, "-n", SYSTEM, "patch", "deployment", DEPLOYMENT, "--type=json", "-p",
        json.dumps([
            {"op": "replace", "path": "/spec/replicas", "value": 1},
            {"op": "remove", "path": "/spec/template/spec/containers/0/lifecycle"},
        ]),
    )  # fmt: skip
    kubectl_ok(
        installed, "-n", SYSTEM, "rollout", "status", f"deployment/{DEPLOYMENT}",
        "--timeout=240s", timeout=260,
    )  # fmt: skip

    def one_ready_pod() -> str | None:
        pods = webhook_pods(installed)
        live = [p for p in pods if ready(p)]
        return live[0]["metadata"]["name"] if len(pods) == 1 and live else None

    victim = installed.wait_for("one Ready webhook Pod", one_ready_pod, SCENARIO_TIMEOUT_S)
    with create_loop as loop:
        time.sleep(SETTLE_S)
        kubectl_ok(installed, "-n", SYSTEM, "delete", "pod", victim, "--timeout=120s")
        installed.wait_for(
            "a new Ready webhook Pod",
            lambda: (name := one_ready_pod()) is not None and name != victim,
            SCENARIO_TIMEOUT_S,
        )
        time.sleep(SETTLE_S)
    node_figures["negative control (1 replica, no preStop): attempted / failed"] = (
        f"{loop.attempts} / {len(loop.failures)}"
    )
    assert loop.failures
    # The API server's words (JSON-escaped in the client's exception text).
    assert all("failed calling webhook" in f for f in loop.failures)
    assert all("no endpoints available for service" in f for f in loop.failures)
    assert any("mutate.tpu-webhook.io" in f for f in loop.failures)


# ---------------------------------------------------------------------------- the outage

OUTAGE = "tpu-outage"
JOB_TRACKING = "batch.kubernetes.io/job-tracking"
RUNNING_S = 40  # how long each Pod of the finishing Job runs: the outage begins meanwhile


def tpu_job(name: str, *, sleep: int = 0, queued: bool = False) -> dict[str, Any]:
    """A 4-host v4 2x2x4 Indexed Job of the printenv image (4 chips per Pod: the node's 16).

    `queued`: as Kueue holds it, suspended in a queue with no TPU node labels yet (they come
    from its ResourceFlavor when Kueue admits it)."""
    container = {
        "name": "main",
        "image": PRINTENV_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["/printenv", *([str(sleep)] if sleep else [])],
        "resources": {
            "requests": {"cpu": "50m", "memory": "16Mi", "google.com/tpu": "4"},
            "limits": {"cpu": "50m", "memory": "16Mi", "google.com/tpu": "4"},
        },
    }
    pod_spec: dict[str, Any] = {
        "subdomain": name,
        "restartPolicy": "Never",
        "containers": [container],
    }
    metadata: dict[str, Any] = {"name": name}
    if queued:
        metadata["labels"] = {"kueue.x-k8s.io/queue-name": "tpu-queue"}
    else:
        pod_spec["nodeSelector"] = dict(TPU_LABELS)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "suspend": queued,
            "backoffLimit": 0,
            "completions": 4,
            "parallelism": 4,
            "completionMode": "Indexed",
            "template": {"spec": pod_spec},
        },
    }


def headless_service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"clusterIP": "None", "selector": {"job-name": name}},
    }


def job_pods(node: ClusterNode, name: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = get_json(node, "pods", "-n", OUTAGE, "-l", f"job-name={name}")[
        "items"
    ]
    return pods


def condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c["type"] == kind and c["status"] == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


def ready_endpoints(node: ClusterNode) -> list[str]:
    slices = get_json(
        node, "endpointslices", "-n", SYSTEM, "-l", f"kubernetes.io/service-name={DEPLOYMENT}"
    )["items"]
    return [
        a
        for s in slices
        for e in s.get("endpoints") or []
        if e.get("conditions", {}).get("ready")
        for a in e["addresses"]
    ]


@pytest.fixture
def outage_namespace(installed: ClusterNode) -> Iterator[str]:
    kubectl_ok(installed, "create", "namespace", OUTAGE)
    wait_default_service_account(installed, OUTAGE)
    yield OUTAGE
    installed.kubectl("delete", "namespace", OUTAGE, "--wait=false")


def test_with_every_webhook_replica_down_only_creating_tpu_workloads_is_refused(
    installed: ClusterNode, outage_namespace: str, node_figures: dict[str, str]
) -> None:
    """What an outage blocks, with the chart's defaults (chart README, "What an outage
    blocks"): the cluster's own machinery on existing TPU workloads goes on; creating TPU
    workloads, by a user or a controller, waits for the webhook."""
    node, ns = installed, outage_namespace
    replicas = get_json(node, "deployment", DEPLOYMENT, "-n", SYSTEM)["spec"]["replicas"]
    figures = node_figures
    finishing, queued = tpu_job("finishing", sleep=RUNNING_S), tpu_job("queued", queued=True)
    manifest = [headless_service("finishing"), finishing, headless_service("queued"), queued]
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": manifest})
    kubectl_ok(node, "create", "-n", ns, "-f", "-", input=listed)
    running = node.wait_for(
        "the finishing Job's 4 Pods Running, with the Job controller's tracking finalizer",
        lambda: (
            len(pods := job_pods(node, "finishing")) == 4
            and all(p["status"].get("phase") == "Running" for p in pods)
            and all(JOB_TRACKING in p["metadata"].get("finalizers", []) for p in pods)
            and pods
        ),
        timeout=120,
    )
    assert len(running) == 4

    # every replica down: no endpoint left for the API server to call
    began = time.monotonic()
    kubectl_ok(node, "-n", SYSTEM, "scale", "deployment", DEPLOYMENT, "--replicas=0")
    node.wait_for(
        "no webhook Pod and no ready endpoint",
        lambda: not webhook_pods(node) and not ready_endpoints(node),
        timeout=120,
    )
    figures["outage: scale to 0 -> no endpoint"] = f"{time.monotonic() - began:.1f} s"
    outage_began = time.monotonic()
    try:
        # the outage began while the Job ran: what follows happened during it
        assert not condition(get_json(node, "job", "finishing", "-n", ns), "Complete")
        assert {p["status"]["phase"] for p in job_pods(node, "finishing")} == {"Running"}
        # the Job's Pods finish; the Job controller removes its finalizers; the Job completes
        node.wait_for(
            "the finishing Job Complete",
            lambda: condition(get_json(node, "job", "finishing", "-n", ns), "Complete"),
            timeout=RUNNING_S + 120,
        )
        figures["outage: running Job -> Complete (after the outage began)"] = (
            f"{time.monotonic() - outage_began:.1f} s"
        )
        finished = job_pods(node, "finishing")
        assert [p["status"]["phase"] for p in finished] == ["Succeeded"] * 4
        assert all(JOB_TRACKING not in p["metadata"].get("finalizers", []) for p in finished)

        # deleting the Job deletes its Pods (the garbage collector, background propagation)
        kubectl_ok(node, "delete", "job", "finishing", "-n", ns, "--timeout=60s")
        node.wait_for(
            "the finishing Job's Pods deleted", lambda: not job_pods(node, "finishing"), 120
        )

        # Kueue admits the queued Job: its flavor's node labels, then suspend: false
        admitted = {"spec": {"suspend": False, "template": {"spec": {"nodeSelector": TPU_LABELS}}}}
        unsuspend = node.kubectl(
            "patch", "job", "queued", "-n", ns, "--type=merge", "-p", json.dumps(admitted)
        )
        assert unsuspend.returncode == 0, unsuspend.stderr
        stored = get_json(node, "job", "queued", "-n", ns)["spec"]
        assert stored["suspend"] is False
        assert stored["template"]["spec"]["nodeSelector"] == TPU_LABELS

        # ...but the Job controller cannot create its TPU Pods until the webhook is back
        def failed_create() -> str | None:
            fields = "involvedObject.name=queued,reason=FailedCreate"
            events = get_json(node, "events", "-n", ns, "--field-selector", fields)["items"]
            return str(events[0]["message"]) if events else None

        message = node.wait_for("a FailedCreate event of the queued Job", failed_create, 120)
        assert 'failed calling webhook "mutate.tpu-webhook.io"' in message
        assert "no endpoints available for service" in message
        assert job_pods(node, "queued") == []

        # a user's new TPU Job is refused
        refused = node.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(tpu_job("new")))
        assert refused.returncode != 0
        assert 'failed calling webhook "mutate.tpu-webhook.io"' in refused.stderr
        assert "no endpoints available for service" in refused.stderr
        # and anything that is not a TPU workload is never sent
        plain = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "plain"},
            "spec": {"containers": [{"name": "c", "image": PRINTENV_IMAGE,
                                     "imagePullPolicy": "Never", "command": ["/printenv"]}]},
        }  # fmt: skip
        kubectl_ok(node, "create", "-n", ns, "-f", "-", input=json.dumps(plain))
        figures["outage: lasted"] = f"{time.monotonic() - outage_began:.1f} s"
    finally:
        kubectl_ok(node, "-n", SYSTEM, "scale", "deployment", DEPLOYMENT, f"--replicas={replicas}")
        kubectl_ok(
            node, "-n", SYSTEM, "rollout", "status", f"deployment/{DEPLOYMENT}",
            "--timeout=240s", timeout=260,
        )  # fmt: skip

    # back: the Job controller's next try creates the queued Job's Pods, patched, and it runs
    back = time.monotonic()
    kubectl_ok(
        node, "wait", "-n", ns, "--for=condition=Complete", "job/queued", "--timeout=240s",
        timeout=260,
    )  # fmt: skip
    figures["outage over: replicas Ready -> the queued Job Complete"] = (
        f"{time.monotonic() - back:.1f} s"
    )
    pods = job_pods(node, "queued")
    assert len(pods) == 4
    hostnames = ",".join(f"queued-{i}.queued" for i in range(4))
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["TPU_WORKER_HOSTNAMES"] == hostnames
