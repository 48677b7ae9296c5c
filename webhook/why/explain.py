"""Why a TPU workload does not run, and what to change: the webhook's view (the shape asked for,
the shapes the cluster offers, the findings) joined with the object's conditions, its Pods'
states and the recent Events, said in one screen. Pure: the CLI fetches, this reads."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.audit.verdicts import Audited
from webhook.catalog.tpu import ACCELERATOR_LABEL, TOPOLOGY_LABEL, TPU_RESOURCE
from webhook.policy.stored import CODE as WORKER_ENV_MISSING
from webhook.why import facts
from webhook.why.facts import mapping, name_of

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NO_NODE_MATCHES = "didn't match Pod's node affinity/selector"
TOO_FEW_CHIPS = f"Insufficient {TPU_RESOURCE}"
UNTOLERATED = "untolerated taint"
FAILED_TYPES = ("Failed", "FailureTarget")


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the CLI fetched about one workload."""

    kind: str
    obj: Mapping[str, Any]  # the workload as stored
    audited: Audited | None  # the webhook's view of it; None: it asks for no TPU
    offered: tuple[str, ...] | None  # the shapes the cluster offers; None: not known
    pods: tuple[Mapping[str, Any], ...]  # its Pods (a Pod: itself)
    events: tuple[Mapping[str, Any], ...]  # Events about it and its Pods
    now: dt.datetime


@dataclass(frozen=True, slots=True)
class Reason:
    why: str
    fix: str


def explain(e: Evidence) -> list[str]:
    """The screen: what it is, what the webhook sees, its state, its Events, why, what to do."""
    lines = [f"{e.kind} {_where(e.obj)}: {_state(e)}", *_view(e)]
    status = _status(e)
    if status:
        lines += ["Status:", *(f"  {s}" for s in status)]
    shown = facts.newest_events(e.events)
    if shown:
        lines += ["Events (newest first):", *(f"  {facts.event_line(x, e.now)}" for x in shown)]
    reasons = diagnose(e)
    if not reasons:
        running = e.pods and all(facts.phase(p) in ("Running", "Succeeded") for p in e.pods)
        lines.append(
            "It runs: every Pod is Running or Succeeded."
            if running
            else "Why: nothing here says; `kubectl describe` its Pods, and wait a little if it "
            "was created just now."
        )
        return lines
    for reason in reasons:
        lines += [f"Why: {reason.why}", f"Fix: {reason.fix}"]
    return lines


def diagnose(e: Evidence) -> list[Reason]:
    """Every reason found, the most basic first (a refused shape before a crash loop)."""
    found: list[Reason] = []
    for check in CHECKS:
        found += check(e)
    return found


def _where(obj: Mapping[str, Any]) -> str:
    namespace = mapping(obj.get("metadata")).get("namespace")
    return f"{namespace}/{name_of(obj)}" if namespace else name_of(obj)


def _state(e: Evidence) -> str:
    if e.kind == "Pod":
        return facts.phase(e.obj)
    return facts.pod_summary(e.pods)


def _view(e: Evidence) -> list[str]:
    if e.audited is None:
        return ["TPU:      asks for none (no google.com/tpu, TPU selector or TPU claim)"]
    lines = [f"TPU:      asks {shape}" for shape in e.audited.asks] or ["TPU:      asks TPUs"]
    if e.offered is None:
        lines.append(
            "Cluster:  shows no TPU shape (no TPU Node, ComputeClass, ResourceFlavor or declared "
            "shape: node pools at zero leave no Node)"
        )
    else:
        lines += [f"Cluster:  offers {shape}" for shape in e.offered] or [
            "Cluster:  offers no TPU shape"
        ]
    verdict = {
        "denied": "would deny it now",
        "warned": "admits it, with warnings",
        "admitted": "admits it",
        "exempt": "does not check it (tpu-webhook.io/ignore)",
    }[e.audited.verdict]
    lines.append(f"Webhook:  {verdict}")
    for f in e.audited.findings:
        lines.append(f"  {'error' if f.denial else 'warning'} [{f.code}] {f.message}")
    return lines


def _status(e: Evidence) -> list[str]:
    lines = []
    if mapping(e.obj.get("spec")).get("suspend") is True:
        lines.append("suspended (spec.suspend: true)")
    for condition in facts.conditions(e.obj) if e.kind != "Pod" else ():
        if condition.get("status") == "True":
            message = f": {condition['message']}" if condition.get("message") else ""
            lines.append(f"{condition.get('type')} ({condition.get('reason', '')}){message}")
    said: dict[str, list[str]] = {}  # a line -> the Pods it is true of (said once)
    for pod in e.pods:
        stuck = facts.unschedulable(pod)
        found = [f"PodScheduled=False (Unschedulable): {stuck.message}"] if stuck else []
        found += [f"scheduling gates: {', '.join(g)}" for g in [facts.gates(pod)] if g]
        for w in facts.waiting(pod):
            last = f", last {w.last_exit}" if w.last_exit else ""
            found.append(
                f"container {w.container}: {w.reason}, restarted {_times(w.restarts)}{last}"
            )
        for line in found:
            said.setdefault(line, []).append(name_of(pod))
    for line, pods in said.items():
        if e.kind == "Pod":
            lines.append(line)
            continue
        more = f" and {len(pods) - 1} more" if len(pods) > 1 else ""
        lines.append(f"pod/{pods[0]}{more}: {line}")
    return lines


def _refused(e: Evidence) -> list[Reason]:
    if e.audited is None:
        return []
    return [
        Reason(
            f"tpu-webhook would refuse it now: {f.message}",
            f"change what the message names and create it again (`tpu-webhook rules {f.code}`)",
        )
        for f in e.audited.denials[:2]
    ]


def _suspended(e: Evidence) -> list[Reason]:
    if mapping(e.obj.get("spec")).get("suspend") is not True:
        return []
    queue = mapping(mapping(e.obj.get("metadata")).get("labels")).get(KUEUE_QUEUE_LABEL)
    if queue:
        return [
            Reason(
                f"Kueue holds it suspended in queue {queue} until it admits it",
                f"`kubectl get workloads -n {_namespace(e.obj)}` says why it waits; its "
                f"ClusterQueue needs free quota of a TPU ResourceFlavor for every chip it asks",
            )
        ]
    return [
        Reason(
            "it is suspended (spec.suspend: true): its Pods are not created",
            f"kubectl patch {e.kind.lower()} {name_of(e.obj)} --type=merge "
            '-p \'{"spec":{"suspend":false}}\'',
        )
    ]


def _gated(e: Evidence) -> list[Reason]:
    for pod in e.pods:
        names = facts.gates(pod)
        if names:
            return [
                Reason(
                    f"Pod {name_of(pod)} waits for its scheduling gates ({', '.join(names)}): "
                    "the scheduler does not try it until they are lifted",
                    "whoever set them lifts them (kueue.x-k8s.io gates: Kueue, when it admits "
                    "the workload and its topology)",
                )
            ]
    return []


def _unschedulable(e: Evidence) -> list[Reason]:
    for pod in e.pods:
        stuck = facts.unschedulable(pod)
        if stuck is not None:
            return [_placement(e, pod, stuck.message)]
    return []


def _placement(e: Evidence, pod: Mapping[str, Any], message: str) -> Reason:
    """Why the scheduler places the Pod on no node, by the clauses of its message."""
    selector = mapping(mapping(pod.get("spec")).get("nodeSelector"))
    asked = " ".join(str(selector[k]) for k in (ACCELERATOR_LABEL, TOPOLOGY_LABEL) if k in selector)
    scheduler = f"the scheduler: {message.split('. ')[0].rstrip('.')}."
    pods = "this Pod" if e.kind == "Pod" else "its Pods"
    if NO_NODE_MATCHES in message and asked:
        offered = "; ".join(e.offered) if e.offered else ""
        joined = (
            f"the cluster offers {offered}; {pods} ask{'s' * (e.kind == 'Pod')} {asked}"
            if offered
            else f"no node has the TPU labels {pods} select{'s' * (e.kind == 'Pod')} ({asked})"
        )
        return Reason(
            f"{joined}; {scheduler}",
            f"ask for a shape the cluster has, or add a node pool of {asked} (nodes appear "
            "without one only with node auto-provisioning)",
        )
    if TOO_FEW_CHIPS in message:
        return Reason(
            f"the nodes it may run on have too few free {TPU_RESOURCE} chips for its "
            f"{_chips(pod)}; {scheduler}",
            "wait for the TPU Pods on them to finish, or add nodes: a slice needs all of its "
            "hosts free at once",
        )
    if UNTOLERATED in message:
        return Reason(
            f"it does not tolerate the nodes' taint; {scheduler}",
            f"add the toleration (GKE taints TPU nodes {TPU_RESOURCE}=present:NoSchedule)",
        )
    return Reason(scheduler, "each clause of the message counts the nodes that fail one test")


def _stuck(e: Evidence) -> list[Reason]:
    env = (
        [] if e.audited is None else [f for f in e.audited.findings if f.code == WORKER_ENV_MISSING]
    )
    for pod in e.pods:
        for w in facts.waiting(pod):
            last = f", last {w.last_exit}" if w.last_exit else ""
            what = f"container {w.container} of Pod {w.pod} is in {w.reason}"
            if w.reason == "CrashLoopBackOff":
                fix = f"its log says why: kubectl logs {w.pod} -c {w.container} --previous"
                if env:
                    fix += f"; it runs without its worker variables ({env[0].message})"
                return [Reason(f"{what}: restarted {_times(w.restarts)}{last}", fix)]
            detail = f": {w.message}" if w.message else ""
            return [Reason(f"{what}{detail}", "fix the image or configuration it names")]
    return []


def _failed(e: Evidence) -> list[Reason]:
    return [
        Reason(
            f"the {e.kind} failed: {c.get('reason', '')}: {c.get('message', '')}",
            "its Pods' logs say why; a TPU slice fails as a whole when one host fails",
        )
        for c in facts.true_conditions(e.obj, FAILED_TYPES)[:1]
    ]


def _no_pods(e: Evidence) -> list[Reason]:
    if e.kind == "Pod" or e.pods or mapping(e.obj.get("spec")).get("suspend") is True:
        return []
    failed = [x for x in facts.newest_events(e.events) if x.get("reason") == "FailedCreate"]
    if failed:
        message = " ".join(str(failed[0].get("message", "")).split())
        return [Reason(f"its Pods cannot be created: {message}", "change what the message names")]
    return [
        Reason(
            "it has no Pods, and no Event says why",
            "is its operator running? (JobSet, LeaderWorkerSet and KubeRay make the Pods)",
        )
    ]


def _chips(pod: Mapping[str, Any]) -> str:
    total = 0
    for container in mapping(pod.get("spec")).get("containers") or ():
        limits = mapping(mapping(mapping(container).get("resources")).get("limits"))
        value = limits.get(TPU_RESOURCE)
        total += int(str(value)) if str(value).isdigit() else 0
    return f"{total} chips" if total else "chips"


def _times(restarts: int) -> str:
    return f"{restarts} time{'s' * (restarts != 1)}"


def _namespace(obj: Mapping[str, Any]) -> str:
    return str(mapping(obj.get("metadata")).get("namespace") or "default")


CHECKS: Sequence[Callable[[Evidence], list[Reason]]] = (
    _refused,
    _suspended,
    _no_pods,
    _gated,
    _unschedulable,
    _stuck,
    _failed,
)
