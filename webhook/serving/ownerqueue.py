"""What the admission endpoint hands the owner-event recorder (serving/ownerevents.py) once a
review is answered: a small Record of a controller-made object's findings, through a bounded
queue that never blocks. A full queue drops the record (counted); a dry run, a review without
findings and an object no controller made give no record at all.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import NamedTuple

from webhook.admission.dispatch import Endpoint
from webhook.admission.responses import Mode
from webhook.admission.review import Request
from webhook.policy.bounds import MAX_FINDINGS
from webhook.policy.decide import Verdict
from webhook.policy.workloads import owner_role
from webhook.serving.eventbook import Finding
from webhook.serving.ownerchain import ObjectRef, controller_ref

log = logging.getLogger("tpu_webhook.events")

# Records waiting for the recorder; beyond this they are dropped (each about 1 KiB).
QUEUE_SIZE = 1024
# What became of a finding (the metric's `result`)
RECORDED, CORRELATED, DROPPED, FAILED = "recorded", "correlated", "dropped", "failed"


class Record(NamedTuple):
    child: str  # `StatefulSet default/lws-0`: the object reviewed
    owner: ObjectRef  # its controller, where the walk up starts
    findings: tuple[Finding, ...]
    endpoint: Endpoint
    mode: Mode


def record_of(request: Request, endpoint: Endpoint, mode: Mode, answered: Verdict) -> Record | None:
    """The record of a review answered `answered` (in its mode), or None when it records
    nothing: a dry run, no finding, or an object no controller made (a controlling owner of a
    built-in kind that makes no workloads, a Node of a mirror Pod, is no maker: the policy's
    owner_role)."""
    if request.dry_run or not (answered.denials or answered.warnings):
        return None
    obj = request.object
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(metadata, dict) or not request.namespace:
        return None
    owner = controller_ref(metadata, request.namespace)
    if owner is None or owner_role(owner.group, owner.kind) is None:
        return None
    name = request.name or metadata.get("name") or metadata.get("generateName")
    child = f"{request.kind.kind} {request.namespace}/{name if isinstance(name, str) else ''}"
    findings = [Finding(v.code, v.message, True) for v in answered.denials[:MAX_FINDINGS]]
    findings += [Finding(v.code, v.message, False) for v in answered.warnings[:MAX_FINDINGS]]
    return Record(child[:512], owner, tuple(findings), endpoint, mode)


class Counts:
    """(result, rule, outcome) -> findings, written by the endpoint and the recorder's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str, str], int] = {}

    def add(self, result: str, finding: Finding, n: int = 1) -> None:
        key = (result, finding.code, finding.outcome)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + n

    def snapshot(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self._counts)


class OwnerEventQueue:
    """Closed (records nothing) until a recorder opens it."""

    def __init__(self, size: int = QUEUE_SIZE) -> None:
        self.enabled = False
        self.counts = Counts()
        self._queue: queue.Queue[Record] = queue.Queue(size)

    def offer(
        self, request: Request, endpoint: Endpoint, mode: Mode, answered: Verdict | None
    ) -> None:
        """Hand the review's findings over, if it has any to record; never blocks or raises."""
        if not self.enabled or answered is None:
            return
        try:
            record = record_of(request, endpoint, mode, answered)
            if record is None:
                return
            try:
                self._queue.put_nowait(record)
            except queue.Full:
                for finding in record.findings:
                    self.counts.add(DROPPED, finding)
        except Exception:  # a bug here must not reach the review, already answered
            log.exception("owner events: the review's record was not made")

    def take(self, timeout: float) -> Record | None:
        """The next record, or None after `timeout` seconds without one."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
