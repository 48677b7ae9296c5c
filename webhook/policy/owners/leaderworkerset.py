"""A LeaderWorkerSet: `replicas` groups of `size` Pods, a leader and size - 1 workers; each
group (or each sub-group of `subGroupPolicy.subGroupSize` Pods) is one slice.

The leader counts as a host of the slice only when it requests chips (LeaderWorkerSet's Pod
webhook, sigs.k8s.io/lws pkg/utils/accelerators/tpu.go, shifts the worker ids otherwise); Pods
are `<lws>-<group>` (leader) and `<lws>-<group>-<i>` (workers).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from webhook.catalog.tpu import (
    ACCELERATOR_LABEL,
    TOPOLOGY_LABEL,
    Catalog,
    SliceShape,
)
from webhook.policy.cluster import ClusterView
from webhook.policy.exemptions import Exemptions
from webhook.policy.paths import FieldPath
from webhook.policy.podspec import TpuSpec, slice_shape
from webhook.policy.slice_rules import hostname_too_long
from webhook.policy.templates import Obj, Sites, dig
from webhook.policy.violations import Violation, invalid, required, shown

TEMPLATE = ("spec", "leaderWorkerTemplate")
SIZE = (*TEMPLATE, "size")
SUB_GROUP_SIZE = (*TEMPLATE, "subGroupPolicy", "subGroupSize")


def check(
    obj: Obj, sites: Sites, catalog: Catalog, exemptions: Exemptions, cluster: ClusterView
) -> list[Violation]:
    by_role = {site.template.path[-1]: tpu for site, tpu in sites}
    worker = by_role.get("workerTemplate")
    shape = slice_shape(worker, catalog) if worker is not None and worker.chips else None
    if worker is None or shape is None or not shape.multi_host:
        return []
    leader = by_role.get("leaderTemplate")
    has_leader_template = isinstance(dig(obj, (*TEMPLATE, "leaderTemplate")), dict)
    leader_hosts = not has_leader_template or (leader is not None and bool(leader.chips))
    return [
        *_check_size(obj, shape, leader_hosts),
        *_check_leader_shape(leader, worker, shape),
        *_check_hostname_length(obj),
    ]


def _check_size(obj: Mapping[str, Any], shape: SliceShape, leader_hosts: bool) -> list[Violation]:
    sub_group = dig(obj, SUB_GROUP_SIZE)
    if sub_group is not None:
        if sub_group == shape.hosts and not isinstance(sub_group, bool):
            return []
        return [
            invalid(
                "tpu.multihost-parallelism",
                FieldPath.root(*SUB_GROUP_SIZE),
                sub_group,
                f"{shape.describe()}, one slice per sub-group; set subGroupSize to {shape.hosts}",
            )
        ]
    size = dig(obj, SIZE)
    value = 1 if size is None else size
    wanted = shape.hosts if leader_hosts else shape.hosts + 1
    if value == wanted and not isinstance(value, bool):
        return []
    why = (
        "the leader requests chips and is host 0"
        if leader_hosts
        else f"the leader requests no chips: the leader and {shape.hosts} workers"
    )
    detail = f"{shape.describe()}; {why}, so set size to {wanted}"
    if size is None:
        return [
            required(
                "tpu.multihost-parallelism", FieldPath.root(*SIZE), f"{detail} (it defaults to 1)"
            )
        ]
    return [invalid("tpu.multihost-parallelism", FieldPath.root(*SIZE), size, detail)]


def _check_leader_shape(
    leader: TpuSpec | None, worker: TpuSpec, shape: SliceShape
) -> list[Violation]:
    """A leader with chips is host 0 of its workers' slice: the same TPU type and slice."""
    if leader is None or not leader.chips:
        return []
    found = []
    for label, mine, theirs in (
        (ACCELERATOR_LABEL, leader.accelerator_value, worker.accelerator_value),
        (TOPOLOGY_LABEL, leader.topology, worker.topology),
    ):
        if mine != theirs:
            found.append(
                invalid(
                    "tpu.slice-shape-mismatch",
                    leader.label_field(label)
                    if leader.slice_value is None or label == ACCELERATOR_LABEL
                    else leader.slice_field,
                    mine,
                    f"the leader requests chips, so it is host 0 of its workers' "
                    f"{shape.accelerator} {shape.topology} slice; set the worker template's "
                    f"{json.dumps(shown(theirs) if isinstance(theirs, str) else theirs)}",
                )
            )
    return found


def _check_hostname_length(obj: Mapping[str, Any]) -> list[Violation]:
    name = dig(obj, ("metadata", "name"))
    replicas, size = dig(obj, ("spec", "replicas")), dig(obj, SIZE)
    if not isinstance(name, str) or not name:
        return []
    groups = replicas if isinstance(replicas, int) and replicas > 0 else 1
    pods = size if isinstance(size, int) and size > 1 else 1
    last = f"{name}-{groups - 1}-{pods - 1}" if pods > 1 else f"{name}-{groups - 1}"
    return hostname_too_long(name, last, "Pod")
