"""Kueue (read at KUEUE, see common.py): what it does to a queued Job, JobSet or RayJob, the
suspension at CREATE and the UPDATE that admits it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tests.corpus.controllers.common import Obj, asks_for_chips, group_kind, labels_of

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def kueue_queued(obj: Mapping[str, Any]) -> bool:
    return QUEUE_LABEL in labels_of(obj)


def kueue_suspend(obj: Mapping[str, Any]) -> Obj:
    """Kueue's webhooks suspend a queued Job, JobSet or RayJob at CREATE
    (KUEUE pkg/controller/jobframework/defaults.go ApplyDefaultForSuspend)."""
    out = copy.deepcopy(dict(obj))
    out.setdefault("spec", {})["suspend"] = True
    return out


def kueue_admit(obj: Mapping[str, Any], node_labels: Mapping[str, str]) -> Obj:
    """The UPDATE that admits a queued workload: the ResourceFlavor's nodeLabels merged into each
    Pod template's nodeSelector, then suspend false (KUEUE pkg/controller/jobs/job/job_controller.go
    RunWithPodSetsInfo and pkg/podset/podset.go Merge). JobSet propagates the same merge into its
    suspended child Jobs when it resumes them (JOBSET pkg/controllers/jobset_controller.go
    resumeJob), so a child Job's UPDATE is this function applied to the child. Only Pod templates
    with chips get the (TPU) flavor's labels. A RayJob is only unsuspended."""
    out = copy.deepcopy(dict(obj))
    spec = out["spec"]
    kind = group_kind(out)
    templates: list[Obj] = []
    if kind == ("batch", "Job"):
        templates = [spec["template"]]
    elif kind == ("jobset.x-k8s.io", "JobSet"):
        templates = [r["template"]["spec"]["template"] for r in spec.get("replicatedJobs") or []]
    for template in templates:
        # a Pod set without chips gets another flavor (CPU), whose labels are not modelled here
        if asks_for_chips(template.get("spec") or {}):
            selector = template.setdefault("spec", {}).setdefault("nodeSelector", {})
            selector.update(node_labels)
    spec["suspend"] = False
    return out
