"""`kubectl tpu why`: the explanation, table-driven from stored objects (Pods, Jobs, their
status and Events as the API server returns them), and the names it reads."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from webhook.audit.verdicts import Audited, Finding
from webhook.policy.stored import CODE as WORKER_ENV_MISSING
from webhook.why import facts, names
from webhook.why.explain import Evidence, diagnose, explain

NOW = dt.datetime(2026, 12, 2, 16, 0, tzinfo=dt.UTC)
NO_MATCH = (
    "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. no new "
    "claims to deallocate, preemption: 0/1 nodes are available: 1 Preemption is not helpful "
    "for scheduling."
)
TOO_FEW = "0/1 nodes are available: 1 Insufficient google.com/tpu. preemption: ..."
TAINTED = "0/1 nodes are available: 1 node(s) had untolerated taint {google.com/tpu: present}."
ASKS = ("tpu-v6e-slice 4x4 = 16 chips at 4 per host needs 4 hosts",)


def pod(name: str = "train-0", phase: str = "Pending", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {
            "nodeSelector": {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                "cloud.google.com/gke-tpu-topology": "4x4",
            },
            "containers": [{"name": "main", "resources": {"limits": {"google.com/tpu": "4"}}}],
            **status.pop("spec", {}),
        },
        "status": {"phase": phase, **status},
    }


def unschedulable(message: str) -> dict[str, Any]:
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return pod(conditions=[condition | {"message": message}])


def crashing(reason: str = "CrashLoopBackOff", message: str = "") -> dict[str, Any]:
    return pod(
        phase="Running",
        containerStatuses=[
            {
                "name": "main",
                "restartCount": 5,
                "state": {"waiting": {"reason": reason, "message": message}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            }
        ],
    )


def job(**spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", {})
    status = spec.pop("status", {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team", "labels": labels},
        "spec": {"parallelism": 4, **spec},
        "status": status,
    }


def event(reason: str, message: str, seconds_ago: int, about: str = "train-0") -> dict[str, Any]:
    return {
        "metadata": {"uid": f"{reason}-{seconds_ago}"},
        "type": "Warning",
        "reason": reason,
        "message": message,
        "involvedObject": {"kind": "Pod", "name": about},
        "lastTimestamp": (NOW - dt.timedelta(seconds=seconds_ago)).isoformat(),
    }


def webhook(verdict: str = "admitted", *findings: Finding) -> Audited:
    return Audited("v1", "Pod", "team", "train-0", "u", verdict, findings, ASKS)  # type: ignore[arg-type]


MISSING_ENV = Finding(
    WORKER_ENV_MISSING, "spec.containers[0].env", "env: TPU_WORKER_ID not set", False
)
POOL_A = 'tpu-v6e-slice 2x4 (node pool "a" (1 node))'
FORBIDDEN = 'Error creating: pods "train-0" is forbidden'
BACKOFF = {
    "type": "Failed",
    "status": "True",
    "reason": "BackoffLimitExceeded",
    "message": "Job has reached the specified backoff limit",
}
DENIED = Finding("tpu.chips-per-host", "spec.containers[0]", "chips: 3 is not 4", True)


def evidence(
    obj: dict[str, Any], pods: list[dict[str, Any]] | None = None, **more: Any
) -> Evidence:
    return Evidence(
        kind=str(obj["kind"]),
        obj=obj,
        audited=more.get("audited", webhook()),
        offered=more.get("offered"),
        pods=tuple([obj] if pods is None else pods),
        events=tuple(more.get("events", ())),
        now=NOW,
    )


@pytest.mark.parametrize(
    ("case", "why", "fix"),
    [
        pytest.param(
            evidence(unschedulable(NO_MATCH)),
            "no node has the TPU labels this Pod selects (tpu-v6e-slice 4x4); the scheduler: "
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
            "ask for a shape the cluster has, or add a node pool of tpu-v6e-slice 4x4 (nodes "
            "appear without one only with node auto-provisioning)",
            id="no node of its shape",
        ),
        pytest.param(
            evidence(unschedulable(NO_MATCH), offered=(POOL_A,)),
            'the cluster offers tpu-v6e-slice 2x4 (node pool "a" (1 node)); this Pod asks '
            "tpu-v6e-slice 4x4; the scheduler: 0/1 nodes are available: 1 node(s) didn't match "
            "Pod's node affinity/selector.",
            "ask for a shape the cluster has, or add a node pool of tpu-v6e-slice 4x4 (nodes "
            "appear without one only with node auto-provisioning)",
            id="the shapes the cluster offers",
        ),
        pytest.param(
            evidence(unschedulable(TOO_FEW)),
            "the nodes it may run on have too few free google.com/tpu chips for its 4 chips; "
            "the scheduler: 0/1 nodes are available: 1 Insufficient google.com/tpu.",
            "wait for the TPU Pods on them to finish, or add nodes: a slice needs all of its "
            "hosts free at once",
            id="chips taken",
        ),
        pytest.param(
            evidence(unschedulable(TAINTED)),
            "it does not tolerate the nodes' taint; the scheduler: 0/1 nodes are available: 1 "
            "node(s) had untolerated taint {google.com/tpu: present}.",
            "add the toleration (GKE taints TPU nodes google.com/tpu=present:NoSchedule)",
            id="taint",
        ),
        pytest.param(
            evidence(crashing(), audited=webhook("warned", MISSING_ENV)),
            "container main of Pod train-0 is in CrashLoopBackOff: restarted 5 times, last exit "
            "code 1 (Error)",
            "its log says why: kubectl logs train-0 -c main --previous; it runs without its "
            "worker variables (env: TPU_WORKER_ID not set)",
            id="crash loop without worker variables",
        ),
        pytest.param(
            evidence(crashing("ImagePullBackOff", 'Back-off pulling image "trainer"')),
            "container main of Pod train-0 is in ImagePullBackOff: "
            'Back-off pulling image "trainer"',
            "fix the image or configuration it names",
            id="image",
        ),
        pytest.param(
            evidence(pod(spec={"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]})),
            "Pod train-0 waits for its scheduling gates (kueue.x-k8s.io/admission): the "
            "scheduler does not try it until they are lifted",
            "whoever set them lifts them (kueue.x-k8s.io gates: Kueue, when it admits the "
            "workload and its topology)",
            id="gated",
        ),
        pytest.param(
            evidence(pod(), audited=webhook("denied", DENIED)),
            "tpu-webhook would refuse it now: chips: 3 is not 4",
            "change what the message names and create it again (`tpu-webhook rules "
            "tpu.chips-per-host`)",
            id="refused today",
        ),
        pytest.param(
            evidence(job(suspend=True, labels={"kueue.x-k8s.io/queue-name": "tpu-queue"}), []),
            "Kueue holds it suspended in queue tpu-queue until it admits it",
            "`kubectl get workloads -n team` says why it waits; its ClusterQueue needs free "
            "quota of a TPU ResourceFlavor for every chip it asks",
            id="Kueue",
        ),
        pytest.param(
            evidence(job(suspend=True), []),
            "it is suspended (spec.suspend: true): its Pods are not created",
            """kubectl patch job train --type=merge -p '{"spec":{"suspend":false}}'""",
            id="suspended",
        ),
        pytest.param(
            evidence(job(), [], events=[event("FailedCreate", FORBIDDEN, 3, "train")]),
            'its Pods cannot be created: Error creating: pods "train-0" is forbidden',
            "change what the message names",
            id="no Pods",
        ),
        pytest.param(
            evidence(
                job(status={"conditions": [BACKOFF]}),
                [pod(phase="Failed")],
            ),
            "the Job failed: BackoffLimitExceeded: Job has reached the specified backoff limit",
            "its Pods' logs say why; a TPU slice fails as a whole when one host fails",
            id="failed",
        ),
    ],
)  # fmt: skip
def test_why_says_what_keeps_it_from_running_and_what_to_change(
    case: Evidence, why: str, fix: str
) -> None:
    (first, *_) = diagnose(case)
    assert (first.why, first.fix) == (why, fix)
    lines = explain(case)
    assert lines[lines.index(f"Why: {why}") + 1] == f"Fix: {fix}"


def test_the_screen_of_a_pending_pod() -> None:
    case = evidence(
        unschedulable(NO_MATCH),
        events=[event("FailedScheduling", NO_MATCH, 75), event("FailedScheduling", NO_MATCH, 5)],
        offered=(),
    )
    assert explain(case) == [
        "Pod team/train-0: Pending",
        "TPU:      asks tpu-v6e-slice 4x4 = 16 chips at 4 per host needs 4 hosts",
        "Cluster:  offers no TPU shape",
        "Webhook:  admits it",
        "Status:",
        f"  PodScheduled=False (Unschedulable): {NO_MATCH}",
        "Events (newest first):",
        f"  5s  Warning  FailedScheduling  pod/train-0  {NO_MATCH}",
        f"  75s  Warning  FailedScheduling  pod/train-0  {NO_MATCH}",
        "Why: no node has the TPU labels this Pod selects (tpu-v6e-slice 4x4); the scheduler: "
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
        "Fix: ask for a shape the cluster has, or add a node pool of tpu-v6e-slice 4x4 (nodes "
        "appear without one only with node auto-provisioning)",
    ]


def test_a_running_workload_runs_and_a_workload_without_tpus_says_so() -> None:
    running = evidence(job(), [pod(phase="Running"), pod("train-1", phase="Succeeded")])
    no_tpu = evidence(pod(phase="Running"), audited=None)
    assert explain(running)[0] == "Job team/train: 2 Pods: 1 Running, 1 Succeeded"
    assert explain(running)[-1] == "It runs: every Pod is Running or Succeeded."
    assert explain(no_tpu)[1] == (
        "TPU:      asks for none (no google.com/tpu, TPU selector or TPU claim)"
    )


@pytest.mark.parametrize(
    ("name", "kind", "resource"),
    [
        ("train-0", "Pod", "train-0"),
        ("pod/train-0", "Pod", "train-0"),
        ("po/train-0", "Pod", "train-0"),
        ("jobs/train", "Job", "train"),
        ("jobset/train", "JobSet", "train"),
        ("jobsets.jobset.x-k8s.io/train", "JobSet", "train"),
        ("lws/train", "LeaderWorkerSet", "train"),
        ("leaderworkerset/train", "LeaderWorkerSet", "train"),
        ("RayCluster/train", "RayCluster", "train"),
    ],
)
def test_names_are_read_as_kubectl_reads_them(name: str, kind: str, resource: str) -> None:
    workload, found = names.resolve(name)
    assert (workload.kind, found) == (kind, resource)


def test_an_unknown_kind_is_said_as_kubectl_says_it() -> None:
    with pytest.raises(
        names.UnknownKind, match='the server doesn\'t have a resource type "sevice"'
    ):
        names.resolve("sevice/x")


@pytest.mark.parametrize(
    ("kind", "obj", "selector"),
    [
        ("Job", {"metadata": {"name": "t"}}, "batch.kubernetes.io/job-name=t"),
        ("JobSet", {"metadata": {"name": "t"}}, "jobset.sigs.k8s.io/jobset-name=t"),
        ("LeaderWorkerSet", {"metadata": {"name": "t"}}, "leaderworkerset.sigs.k8s.io/name=t"),
        ("StatefulSet", {"spec": {"selector": {"matchLabels": {"b": "2", "a": "1"}}}}, "a=1,b=2"),
        ("PathwaysJob", {"metadata": {"name": "t"}}, ""),
    ],
)
def test_the_pods_of_a_workload_are_found_by_its_controllers_label(
    kind: str, obj: dict[str, Any], selector: str
) -> None:
    workload = next(w for w in names.WORKLOADS.values() if w.kind == kind)
    assert names.pod_selector(workload, obj) == selector


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (119, "119s"), (192, "3m12s"), (180, "3m"), (1500, "25m"), (18000, "5h")],
)
def test_ages_are_printed_as_kubectl_prints_them(seconds: int, shown: str) -> None:
    assert facts.age(NOW - dt.timedelta(seconds=seconds), NOW) == shown


def test_the_offered_shapes_are_read_from_the_view_where_it_has_them() -> None:
    from webhook.live import offered_shapes
    from webhook.policy.cluster import EMPTY
    from webhook.policy.offered import Offered

    offered = Offered({("tpu-v6e-slice", "2x4"): ('node pool "a" (1 node)',)})
    view = EMPTY.__class__(offered=offered)
    assert offered_shapes(EMPTY, "team") is None  # nothing read: "not known"
    assert offered_shapes(view, "team") == ('tpu-v6e-slice 2x4 (node pool "a" (1 node))',)
