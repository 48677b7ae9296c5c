"""Pods that get their TPU nodes from a GKE custom ComputeClass (`cloud.google.com/compute-class`)
rather than from TPU node selectors: the class's priorities are the shapes they may run on.

GKE provisions nodes of the first priority it can, then the next: a Pod is held to every TPU
priority of its class. It is refused only when no priority fits (and every priority is a TPU
one); it is warned about the priorities that do not fit (GKE may fall back to one), and, when
the class is not known here, that its shape was not checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from webhook.catalog.tpu import COMPUTE_CLASS_LABEL, TPU_RESOURCE, Catalog, SliceShape
from webhook.policy.affinity import SEVERAL
from webhook.policy.cluster import COMPUTE_CLASS_KIND, ClusterView, ComputeClass, TpuPriority
from webhook.policy.podspec import TpuSpec, slice_shape
from webhook.policy.templates import Site
from webhook.policy.violations import ErrorType, Violation, invalid

Sites = list[tuple[Site, TpuSpec]]
# The findings on an object whose sites are the ones given: decide's rules, run as they are.
Findings = Callable[[Sites], list[Violation]]


def needs_class(tpu: TpuSpec) -> bool:
    """Whether the spec's TPU type or slice comes from a ComputeClass: it selects one and
    requests chips, without both TPU selectors of its own."""
    return (
        tpu.compute_class is not None
        and bool(tpu.chips)
        and (tpu.accelerator_value is None or tpu.topology_value is None)
    )


def check(
    sites: Sites, cluster: ClusterView, catalog: Catalog, findings: Findings
) -> list[Violation]:
    """The findings on the object with each class-fed site read as each priority would make it:
    those of the first priority that fits, plus a warning for each one that does not."""
    names = {tpu.compute_class for _, tpu in sites if needs_class(tpu)}
    name = names.pop() if len(names) == 1 else SEVERAL
    first = next(tpu for _, tpu in sites if needs_class(tpu))
    known = cluster.compute_class(name) if isinstance(name, str) else None
    if known is None or not known.tpu:  # only what holds whatever the shape is checked
        return [*_unknown(first, name, known, cluster), *findings(sites)]
    outcomes = [(p, findings(_as(sites, p)) + _count(sites, p, catalog)) for p in known.tpu]
    fitting = [found for _, found in outcomes if not any(not v.advisory for v in found)]
    missed = [_tagged(v, known, p) for p, found in outcomes for v in found if not v.advisory]
    if fitting:
        return fitting[0] + [v._replace(advisory=True) for v in missed]
    if known.opaque:  # another priority may have TPU nodes this class does not describe
        return [v._replace(advisory=True) for v in missed]
    return missed


def shape(tpu: TpuSpec, cluster: ClusterView, catalog: Catalog) -> SliceShape | None:
    """The slice a class-fed spec runs, when every TPU priority of its class makes the same
    number of hosts of it (the worker variables then hold whichever GKE picks); None otherwise."""
    name = tpu.compute_class
    known = cluster.compute_class(name) if isinstance(name, str) else None
    if known is None or not known.tpu or known.opaque:
        return None
    shapes = [slice_shape(_shaped(tpu, p), catalog) for p in known.tpu]
    first = shapes[0]
    if first is None or any(s is None or s.hosts != first.hosts for s in shapes):
        return None
    return first


def _as(sites: Sites, priority: TpuPriority) -> Sites:
    """The sites with the priority's TPU type and slice where the class supplies them."""
    return [(site, _shaped(tpu, priority) if needs_class(tpu) else tpu) for site, tpu in sites]


def _shaped(tpu: TpuSpec, priority: TpuPriority) -> TpuSpec:
    return dataclasses.replace(
        tpu,
        accelerator_value=(
            priority.accelerator if tpu.accelerator_value is None else tpu.accelerator_value
        ),
        topology_value=priority.topology if tpu.topology_value is None else tpu.topology_value,
    )


def _count(sites: Sites, priority: TpuPriority, catalog: Catalog) -> list[Violation]:
    """A priority that names its nodes' chips: a Pod runs all chips of its node (where the
    slice allows other counts per host; any other count is the catalog rules' to report)."""
    accelerator = catalog.accelerator(priority.accelerator)
    if priority.chips is None or accelerator is None:
        return []
    runs = accelerator.chips_per_host.get(priority.topology, ())
    found = []
    for _, tpu in sites:
        if not needs_class(tpu):
            continue
        for request in tpu.app_chips:
            if request.chips in runs and request.chips != priority.chips:
                found.append(
                    invalid(
                        "tpu.chips-per-host",
                        request.field,
                        request.chips,
                        f"its nodes have {priority.chips} chips and a Pod runs all chips of its "
                        f"node; set requests and limits to {priority.chips}",
                    )
                )
    return found


def _tagged(found: Violation, known: ComputeClass, priority: TpuPriority) -> Violation:
    return Violation(
        "tpu.compute-class-mismatch",
        found.field,
        found.error,
        f"compute class {known.name} {priority.describe()}: {found.detail}",
        found.value,
    )


def _unknown(
    tpu: TpuSpec, name: object, known: ComputeClass | None, cluster: ClusterView
) -> list[Violation]:
    field = tpu.label_field(COMPUTE_CLASS_LABEL)
    if name is SEVERAL:
        detail = "the Pods may run on several compute classes; their TPU shapes are not checked"
    elif known is not None:
        detail = (
            f"compute class {name} names no TPU (its priorities are machine families or node "
            f"pools); the {TPU_RESOURCE} requests are not checked against its nodes"
        )
    elif COMPUTE_CLASS_KIND in cluster.read:
        detail = (
            f"there is no compute class {name} in the cluster: GKE provisions no node for the "
            "Pods until one is created; create it or fix the name"
        )
    else:
        detail = (
            f"tpu-webhook does not know compute class {name} (it reads none here); the Pods' "
            f"TPU type, slice and {TPU_RESOURCE} requests are not checked against it"
        )
    return [
        Violation(
            "tpu.compute-class-unknown",
            field,
            ErrorType.NOT_FOUND if COMPUTE_CLASS_KIND in cluster.read else ErrorType.UNKNOWN,
            detail,
            name if isinstance(name, str) else None,
            advisory=True,
        )
    ]
