"""Events on the owner, against the real API server and the real LeaderWorkerSet and JobSet
operators: what tpu-webhook finds on an object a controller made is shown by `kubectl describe`
on the object a person wrote.

The server runs as `tpu-webhook serve` with TPU_WEBHOOK_OWNER_EVENTS on and a token of the
chart's ServiceAccount (exactly the chart's RBAC: templates/owner-events.yaml), registered by the
chart's own configurations (url mode). No scheduler or kubelet: Pods stay Pending.

- A LeaderWorkerSet on a TPU generation newer than the webhook's catalog (`tpu8x`): warned at
  `kubectl apply`, and so are the StatefulSets and Pods its operator makes, which nobody sees.
- Workloads waiting in a Kueue queue (the label; Kueue is not installed, so nothing adds the
  topology): the objects that carry the label are warned that the TPU topology is not set yet,
  and so are the Pods, which do not carry it (a controller's child is decided where its owner
  was written); only their controller was told.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from dev.chart import url_mode_configurations, wait_until_live
from dev.controlplane import ControlPlane
from dev.operators import Operators
from tests.support.chart_identity import chart_rbac, token_kubeconfig
from tests.support.webhook_process import WebhookProcess, make_certs

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

T = TypeVar("T")
RUN = uuid.uuid4().hex[:6]
RELEASE = f"events-{RUN}"
NAMESPACE = f"tpu-webhook-{RUN}"  # the release's: its ServiceAccount
UNKNOWN = "[tpu.accelerator-unknown]"
MISSING = "[tpu.topology-missing]"

LWS = """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: vllm
spec:
  replicas: 1
  leaderWorkerTemplate:
    size: 2
    workerTemplate:
      spec:
        nodeSelector:
          cloud.google.com/gke-tpu-accelerator: tpu8x
          cloud.google.com/gke-tpu-topology: 2x2x2
        containers:
        - name: vllm
          image: busybox
          resources:
            limits: {google.com/tpu: 4}
            requests: {google.com/tpu: 4}
"""

JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  labels: {kueue.x-k8s.io/queue-name: tpu}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      nodeSelector:
        cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice
      containers:
      - name: train
        image: busybox
        resources:
          limits: {google.com/tpu: 4}
          requests: {google.com/tpu: 4}
"""

JOBSET = """\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: train
  labels: {kueue.x-k8s.io/queue-name: tpu}
spec:
  replicatedJobs:
  - name: slice
    replicas: 1
    template:
      metadata:
        labels: {kueue.x-k8s.io/queue-name: tpu}
      spec:
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            nodeSelector:
              cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice
            containers:
            - name: train
              image: busybox
              resources:
                limits: {google.com/tpu: 4}
                requests: {google.com/tpu: 4}
"""


def wait_for(predicate: Callable[[], T | None], what: str, timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout}s")


@pytest.fixture(scope="module")
def server(
    control_plane: ControlPlane, operators: Operators, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    cp = control_plane
    cp.kubectl("create", "namespace", NAMESPACE, check=True)
    rbac = chart_rbac(RELEASE, NAMESPACE)
    assert f"{RELEASE}-tpu-webhook-owner-events" in {o["metadata"]["name"] for o in rbac}
    manifest = "\n".join(json.dumps(o) for o in rbac)
    cp.kubectl("apply", "-f", "-", input=manifest, check=True)
    (account,) = [o["metadata"]["name"] for o in rbac if o["kind"] == "ServiceAccount"]
    work = tmp_path_factory.mktemp("owner-events")
    make_certs(work)
    environment = {
        "TPU_WEBHOOK_OWNER_EVENTS": "true",
        "TPU_WEBHOOK_KUBECONFIG": str(
            token_kubeconfig(cp, account, NAMESPACE, work / "kubeconfig")
        ),
    }
    with WebhookProcess(work, env=environment) as process:
        configurations = url_mode_configurations(
            process.url, process.ca_file.read_bytes(), release=RELEASE, namespace=NAMESPACE
        )
        registration = "\n".join(json.dumps(c) for c in configurations)
        cp.kubectl("apply", "-f", "-", input=registration, check=True)
        try:
            assert wait_until_live(cp, "default"), "the webhook configurations never went live"
            yield process
        finally:
            cp.kubectl("delete", "-f", "-", input=registration)
            cp.kubectl("delete", "-f", "-", input=manifest)
            cp.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


@pytest.fixture
def ns(control_plane: ControlPlane, server: WebhookProcess) -> Iterator[str]:
    name = f"events-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", name, check=True)
    wait_for(
        lambda: control_plane.kubectl("get", "-n", name, "sa", "default").returncode == 0,
        f"serviceaccount {name}/default",
    )
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false")


def apply(cp: ControlPlane, ns: str, manifest: str) -> str:
    """`kubectl apply -n NS -f -`: its warnings."""
    result = cp.kubectl("apply", "-n", ns, "-f", "-", input=manifest)
    assert result.returncode == 0, result.stderr
    return result.stderr


def describe(cp: ControlPlane, ns: str, resource: str, name: str) -> str:
    return cp.kubectl("describe", "-n", ns, resource, name, check=True).stdout


def described_events(cp: ControlPlane, ns: str, resource: str, name: str, *texts: str) -> str:
    """`kubectl describe` once its Events section holds every one of `texts`."""

    last = [""]

    def shown() -> str | None:
        last[0] = text = describe(cp, ns, resource, name)
        events = text.partition("\nEvents:")[2]
        return text if all(t in events for t in texts) else None

    try:
        return wait_for(shown, f"kubectl describe {resource} {name} showing {texts}")
    except AssertionError as error:
        raise AssertionError(f"{error}; it shows:\n{last[0]}") from None


def events_on(cp: ControlPlane, ns: str, kind: str, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    listed = cp.kubectl(
        "get", "events", "-n", ns, "--field-selector", selector, "-o", "json", check=True
    )
    found: list[dict[str, Any]] = json.loads(listed.stdout)["items"]
    return [e for e in found if e.get("source", {}).get("component") == "tpu-webhook"]


def event_line(text: str, reason: str, message: str) -> str:
    """The line of `kubectl describe`'s Events that has `reason` and starts `message`."""
    lines = [line for line in text.splitlines() if f" {reason} " in line and f"  {message}" in line]
    assert len(lines) == 1, f"not one {reason} Event {message!r} in:\n{text}"
    return lines[0]


def metrics(server: WebhookProcess) -> str:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with urllib.request.urlopen(f"{server.url}/metrics", context=context, timeout=5) as answer:
        text: str = answer.read().decode()
    return text


def test_a_leaderworkerset_shows_the_warnings_of_its_statefulsets_and_pods(
    control_plane: ControlPlane, server: WebhookProcess, ns: str
) -> None:
    cp = control_plane
    # its author sees the warning at apply
    assert 'Unsupported value: "tpu8x"' in apply(cp, ns, LWS)
    # The operator's leader StatefulSet vllm and its leader Pod vllm-0, then the workers'
    # StatefulSet vllm-0 and its Pod vllm-0-1, are warned the same: one Event per rule and
    # message, counted twice, naming the object found last.
    text = described_events(
        cp,
        ns,
        "leaderworkerset",
        "vllm",
        "(x2 over",
        f"StatefulSet {ns}/vllm-0: {UNKNOWN}",
        f"Pod {ns}/vllm-0-1: {UNKNOWN}",
    )
    sets = event_line(text, "TPUWebhookWarning", f"StatefulSet {ns}/vllm-0: {UNKNOWN}")
    assert "spec.template.spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: " in sets
    assert 'Unsupported value: "tpu8x": not in this webhook\'s TPU catalog' in sets
    assert " tpu-webhook " in sets  # From
    pods = event_line(text, "TPUWebhookWarning", f"Pod {ns}/vllm-0-1: {UNKNOWN}")
    assert f"{UNKNOWN} spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: " in pods
    lws = json.loads(cp.kubectl("get", "-n", ns, "lws", "vllm", "-o", "json", check=True).stdout)

    def counted() -> list[dict[str, Any]] | None:
        events = events_on(cp, ns, "LeaderWorkerSet", "vllm")
        return events if sorted(e["count"] for e in events) == [2, 2] else None

    events = wait_for(counted, "two Events, each counted twice")
    assert {e["involvedObject"]["uid"] for e in events} == {lws["metadata"]["uid"]}
    assert {e["reason"] for e in events} == {"TPUWebhookWarning"}
    scraped = metrics(server)
    for result in ("recorded", "correlated"):
        labels = f'outcome="warned",result="{result}",rule="tpu.accelerator-unknown"'
        assert f"tpu_webhook_owner_events_total{{{labels}}} 2.0" in scraped


def test_a_job_s_pod_warned_shows_on_the_job(
    control_plane: ControlPlane, server: WebhookProcess, ns: str
) -> None:
    assert "gke-tpu-topology]: Required value: not set yet" in apply(control_plane, ns, JOB)
    text = described_events(control_plane, ns, "job", "train", MISSING)
    # a controller's child missing a label is warned (its owner was decided where it was written)
    line = event_line(text, "TPUWebhookWarning", f"Pod {ns}/train-")
    assert f"{MISSING} spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Required value" in line


def test_a_jobset_shows_its_job_s_warning_and_its_pod_s_not_the_job(
    control_plane: ControlPlane, server: WebhookProcess, ns: str
) -> None:
    cp = control_plane
    assert "gke-tpu-topology]: Required value: not set yet" in apply(cp, ns, JOBSET)
    text = described_events(
        cp,
        ns,
        "jobset",
        "train",
        f"Job {ns}/train-slice-0: {MISSING}",
        f"Pod {ns}/train-slice-0-0-",
    )
    job = event_line(text, "TPUWebhookWarning", f"Job {ns}/train-slice-0: {MISSING}")
    assert "it waits in Kueue queue tpu" in job
    pod = event_line(text, "TPUWebhookWarning", f"Pod {ns}/train-slice-0-0-")
    assert f"{MISSING} spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Required value" in pod
    assert events_on(cp, ns, "Job", "train-slice-0") == []  # the Pod's controller: not its author
