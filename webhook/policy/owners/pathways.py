"""A PathwaysJob (google/pathways-job, `pathways-job.pathways.domain/v1`): one worker type, a
machine type and a topology, run as `numSlices` slices.

Its controller (internal/controller/pathwaysjob_controller.go@c0cc7594) builds one JobSet: a
`pathways-head` Job and a `worker` replicatedJob of `numSlices` Jobs, each of chips / chips per
VM Pods on the accelerator of the machine type, with the TPU selectors it derives; it refuses a
topology its worker type does not run only when it reconciles ("invalid TPU topology for worker
type"), leaving the PathwaysJob without a JobSet. Here that is refused where it is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from webhook.catalog.tpu import Catalog
from webhook.policy.bounds import MAX_POD_TEMPLATES
from webhook.policy.cluster import ClusterView
from webhook.policy.exemptions import Exemptions
from webhook.policy.paths import FieldPath
from webhook.policy.templates import Obj, Sites
from webhook.policy.violations import Violation, shown, unsupported

WORKERS = ("spec", "workers")


def check(
    obj: Obj, sites: Sites, catalog: Catalog, exemptions: Exemptions, cluster: ClusterView
) -> list[Violation]:
    """Each worker's topology is a slice its machine type runs."""
    spec = obj.get("spec")
    workers = spec.get("workers") if isinstance(spec, dict) else None
    found: list[Violation] = []
    for i, worker in enumerate(workers[:MAX_POD_TEMPLATES] if isinstance(workers, list) else ()):
        if isinstance(worker, dict):
            found += _check_worker(worker, FieldPath.root(*WORKERS).index(i), catalog)
    return found


def _check_worker(worker: Mapping[str, Any], at: FieldPath, catalog: Catalog) -> list[Violation]:
    machine_type, topology = worker.get("type"), worker.get("topology")
    if not isinstance(machine_type, str) or not isinstance(topology, str):
        return []  # the CRD requires and types them
    known = catalog.machine(machine_type)
    if known is None:
        return []  # a machine type newer than the catalog: the CRD's enum decides
    accelerator, machine = known
    shapes = accelerator.shapes.get(topology, ())
    if any(s.chips_per_host == machine.chips or s.chips < machine.chips for s in shapes):
        return []  # a slice of its VMs (one VM when the slice has fewer chips)
    offered = sorted(
        {
            t
            for t, group in accelerator.shapes.items()
            for s in group
            if s.chips_per_host == machine.chips
        },
        key=lambda t: (len(t), t),
    )
    return [
        unsupported(
            "tpu.topology-invalid",
            at.child("topology"),
            topology,
            f"a {json.dumps(shown(machine_type))} worker ({accelerator.name}, {machine.chips} "
            f"chips per VM) runs {', '.join(offered[:24])}; the PathwaysJob's controller makes "
            "no JobSet for another topology",
        )
    ]
