"""The audit in the server (`audit_interval_seconds`): a pass every interval, in a worker
thread off the request path, with the server's API client, policy and cluster view; it writes
the PolicyReports of every namespace. One pass at a time; a failing pass is logged and the next
one runs on time. The first pass waits one interval, so the cluster watcher's first view is
there."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from webhook.admission.dispatch import Policy
from webhook.audit.collect import collect
from webhook.audit.publish import ReportsUnavailable, publish
from webhook.certificates.kubeapi import KubeApi

log = logging.getLogger("tpu_webhook.audit")


@dataclass
class Auditor:
    api: KubeApi
    policy: Policy
    interval_seconds: float
    said: set[str] = field(default_factory=set)  # problems logged already (each once)
    passes: int = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_seconds)
            try:
                await asyncio.to_thread(self.audit_once)
            except Exception:
                log.exception("audit: the pass failed")

    def audit_once(self) -> None:
        """List, decide, write the reports; log the outcome and each new problem once."""
        started = time.monotonic()
        found = collect(self.api, self.policy, None)
        problems = list(found.problems)
        try:
            problems += publish(self.api, found.audited, None, int(time.time()))
        except ReportsUnavailable as error:
            problems.append(str(error))
        for problem in problems:
            if problem not in self.said:
                log.warning("audit: %s", problem)
        self.said = set(problems)
        self.passes += 1
        denied = sum(a.verdict == "denied" for a in found.audited)
        warned = sum(a.verdict == "warned" for a in found.audited)
        log.info(
            "audit: %d TPU workloads of %d objects read: %d would be denied, %d warned (%.1f s)",
            len(found.audited),
            found.listed,
            denied,
            warned,
            time.monotonic() - started,
        )
