"""Rules on one pod spec: selectors, chip counts, requests and limits (VM capacity and
cpu/memory quantities: capacity.py)."""

from __future__ import annotations

import json
from functools import cache

from webhook.catalog.tpu import (
    ACCELERATOR_LABEL,
    SLICE_TOPOLOGY_ANNOTATION,
    TOPOLOGY_LABEL,
    TPU_RESOURCE,
    Accelerator,
    Catalog,
    topology_dimensions,
)
from webhook.policy.affinity import SEVERAL
from webhook.policy.bounds import MAX_LABEL_VALUE
from webhook.policy.paths import FieldPath
from webhook.policy.podspec import TpuSpec, fits, known_accelerator, slice_options
from webhook.policy.quantities import quantity, whole_number
from webhook.policy.violations import Violation, forbidden, invalid, required, shown, unsupported


def check_accelerator(
    tpu: TpuSpec, catalog: Catalog, deferred: str | None = None
) -> list[Violation]:
    value = tpu.accelerator_value
    if (isinstance(value, str) and value in catalog.accelerators) or value is SEVERAL:
        return []  # the common case, before any field path or message is built
    field = tpu.label_field(ACCELERATOR_LABEL)
    if value is None:
        if not tpu.chips or tpu.compute_class is not None or claimed(tpu):
            return []  # no slice of its own, or the ComputeClass's or the DRA claim's
        first = tpu.chips[0]
        asks = f"{first.container.path} requests {shown(first.value)} {TPU_RESOURCE} chips"
        if deferred is not None:
            return [
                required(
                    "tpu.accelerator-missing",
                    field,
                    f"{asks} with no TPU type yet; {deferred}: tpu-webhook checks it then",
                    advisory=True,
                )
            ]
        return [
            required(
                "tpu.accelerator-missing",
                field,
                f"{asks}; set the TPU type to run them on, one of {catalog.names()}",
            )
        ]
    if not isinstance(value, str):
        return [
            invalid(
                "tpu.accelerator-unknown",
                field,
                value,
                f"must be a string, one of {catalog.names()}",
            )
        ]
    return _unknown_accelerator(value, field, catalog)


def _unknown_accelerator(value: str, field: FieldPath, catalog: Catalog) -> list[Violation]:
    """A string that names no accelerator of the catalog: a near miss is refused, anything
    else warned about (it may be a TPU type newer than the catalog)."""
    if len(value) > MAX_LABEL_VALUE:
        return [
            invalid(
                "tpu.accelerator-unknown",
                field,
                value,
                f"must be no more than {MAX_LABEL_VALUE} characters (a label value): no node "
                f"has it; use one of {catalog.names()}",
            )
        ]
    meant = catalog.near_miss(value)
    if meant is not None:
        kind = "a machine type, not an accelerator" if catalog.is_machine_type(value) else "unknown"
        return [
            unsupported(
                "tpu.accelerator-unknown",
                field,
                value,
                f"{kind}; did you mean {json.dumps(meant)}?",
            )
        ]
    return [
        unsupported(
            "tpu.accelerator-unknown",
            field,
            value,
            f"not in this webhook's TPU catalog ({catalog.names()}); its topologies and chip "
            "counts are not checked, add it to the catalog (--catalog) if it is a new TPU type",
            advisory=True,
        )
    ]


def check_topology(tpu: TpuSpec, catalog: Catalog, deferred: str | None = None) -> list[Violation]:
    if tpu.accelerator_value is None or tpu.accelerator_value is SEVERAL:
        return []
    accelerator = known_accelerator(tpu, catalog)
    pool, wanted = tpu.topology_value, tpu.slice_value
    if (
        accelerator is not None
        and wanted is None
        and isinstance(pool, str)
        and accelerator.shapes.get(pool)
    ):
        return []  # the common case, before any field path or message is built
    found = _check_pool_topology(tpu, accelerator, catalog, deferred)
    if accelerator is not None and wanted is not None:
        found += _check_slice_topology(tpu, accelerator, catalog)
    return found


def _check_pool_topology(
    tpu: TpuSpec, accelerator: Accelerator | None, catalog: Catalog, deferred: str | None
) -> list[Violation]:
    value = tpu.topology_value
    field = tpu.label_field(TOPOLOGY_LABEL)
    if value is None:
        if not tpu.chips or tpu.compute_class is not None:
            return []  # an agent on every node of a TPU type, or the ComputeClass's slice
        if tpu.slice_value is not None:
            if accelerator is None or accelerator.dynamic_slicing:
                return []  # dynamic slicing: the annotation is the slice
            return [
                required(
                    "tpu.topology-missing",
                    field,
                    f"the slice is given only by the annotation {SLICE_TOPOLOGY_ANNOTATION}; "
                    f"GKE documents that (dynamic slicing) for {_dynamic(catalog)} only: set the "
                    "node pool's topology here as well",
                    advisory=True,
                )
            ]
        example = f' (e.g. "{accelerator.example_topology}")' if accelerator else ""
        also = (
            f", or the slice in the Pod template annotation {SLICE_TOPOLOGY_ANNOTATION} "
            "(GKE dynamic slicing)"
            if accelerator is not None and accelerator.dynamic_slicing
            else ""
        )
        if deferred is not None:
            return [
                required(
                    "tpu.topology-missing",
                    field,
                    f"not set yet; {deferred}: tpu-webhook checks it then",
                    advisory=True,
                )
            ]
        return [
            required(
                "tpu.topology-missing",
                field,
                f"set it when {ACCELERATOR_LABEL} is set{example}{also}",
            )
        ]
    if accelerator is None or value is SEVERAL:
        return []
    if not isinstance(value, str) or not catalog.shapes(accelerator, value):
        return [
            unsupported(
                "tpu.topology-invalid",
                field,
                value,
                f"{accelerator.name} offers {accelerator.offered()}",
            )
        ]
    return []


def _check_slice_topology(
    tpu: TpuSpec, accelerator: Accelerator, catalog: Catalog
) -> list[Violation]:
    """The workload's slice (annotation): well formed, known, and inside the node pool's."""
    value, pool = tpu.slice_value, tpu.topology_value
    field = tpu.slice_field
    dims = topology_dimensions(value) if isinstance(value, str) else None
    if dims is None or len(dims) != accelerator.dimensions:
        example = "x".join(["4"] * accelerator.dimensions)
        return [
            invalid(
                "tpu.topology-invalid",
                field,
                value,
                f"must be a {accelerator.name} topology of {accelerator.dimensions} "
                f'dimensions, such as "{example}"',
            )
        ]
    assert isinstance(value, str)
    if isinstance(pool, str) and catalog.shapes(accelerator, pool) and not fits(value, pool):
        return [
            invalid(
                "tpu.topology-invalid",
                field,
                value,
                f"a {value} slice does not fit in the node pool's {pool} slice "
                f"({TOPOLOGY_LABEL}); pick a slice that fits in {pool}, or a larger node pool",
            )
        ]
    if not catalog.shapes(accelerator, value):
        return [
            unsupported(
                "tpu.topology-invalid",
                field,
                value,
                f"not a {accelerator.name} slice this webhook's catalog knows "
                f"({accelerator.offered()}); its hosts are not checked",
                advisory=True,
            )
        ]
    return []


def check_chip_counts(tpu: TpuSpec, catalog: Catalog) -> list[Violation]:
    found: list[Violation] = []
    accelerator = known_accelerator(tpu, catalog)
    if _runs_every_request(tpu, accelerator):
        return found  # the common case, before any list or message is built
    for r in tpu.chips:
        if r.chips is None and r.which != CLAIMS:  # a claim's chips are the node's (claims.py)
            found.append(
                invalid(
                    "tpu.quantity-invalid",
                    r.field,
                    r.value,
                    f"{TPU_RESOURCE} is a whole number of chips, such as 4",
                )
            )
    if accelerator is None:
        return found
    options = slice_options(tpu, accelerator, catalog)
    if not options:
        return found  # an unknown topology, or a sub-slice that does not fit: reported there
    topology = tpu.topology
    if isinstance(topology, str) and options is accelerator.shapes.get(topology):
        runs = accelerator.chips_per_host[topology]  # all of the topology's: the catalog's table
    else:  # a sub-slice: the shapes that fit its node pool
        runs = tuple(sorted({s.chips_per_host for s in options}))
    apps = tpu.app_chips
    split = accelerator.multiple_tpu_containers and len(apps) > 1
    wrong = []  # loops, not comprehensions: each comprehension is a frame per review
    for r in tpu.chips:
        if (r.container.init or not split) and r.chips is not None and r.chips not in runs:
            wrong.append(r)
    total = tpu.chips_per_pod(split=True) if split else None
    if not wrong and (total is None or total in runs):
        return found
    ok = either(runs)
    where = _slice_name(tpu, accelerator)
    detail = f"{where} runs {ok} chips per host; set requests and limits to {ok}"
    for r in wrong:
        found.append(invalid("tpu.chips-per-host", r.field, r.chips, detail))
    if total is not None and total not in runs:
        found.append(
            invalid(
                "tpu.chips-per-host",
                tpu.at.child("containers"),
                total,
                f"{where} runs {ok} chips per host, shared by the Pod's TPU containers; make "
                f"their {TPU_RESOURCE} requests add up to {ok}",
            )
        )
    return found


@cache  # one entry per list of chip counts the catalog has: bounded by the catalog
def either(counts: tuple[int, ...]) -> str:
    """`4 or 8` (printing ints costs more than the rest of a denial's message)."""
    return " or ".join(map(str, counts))


CLAIMS = "claims"  # ChipRequest.which of the chips a DRA claim gives (policy/claims.py)


def claimed(tpu: TpuSpec) -> bool:
    """Whether the spec's chips come from a DRA claim rather than google.com/tpu requests."""
    return any(r.which == CLAIMS for r in tpu.chips)


def _runs_every_request(tpu: TpuSpec, accelerator: Accelerator | None) -> bool:
    """No sub-slice, no shared host, and every chip request one the topology runs."""
    topology = tpu.topology_value
    if (
        accelerator is None
        or tpu.slice_value is not None
        or not isinstance(topology, str)
        or (accelerator.multiple_tpu_containers and len(tpu.app_chips) > 1)
    ):
        return False
    runs = accelerator.chips_per_host.get(topology)
    if not runs:
        return False
    for request in tpu.chips:  # noqa: SIM110 - all() over a generator builds a frame
        if request.chips not in runs:
            return False
    return True


def _slice_name(tpu: TpuSpec, accelerator: Accelerator) -> str:
    """`tpu-v6e-slice 4x4`, or `tpu-v6e-slice 2x4 (a sub-slice of 4x4)`."""
    pool, wanted = tpu.topology_value, tpu.slice_value
    if wanted is not None and isinstance(pool, str) and pool != wanted:
        return f"{accelerator.name} {wanted} (a sub-slice of {pool})"
    return f"{accelerator.name} {tpu.topology}"


def _dynamic(catalog: Catalog) -> str:
    names = [a.name for a in catalog.accelerators.values() if a.dynamic_slicing]
    return ", ".join(names) or "no accelerator of this catalog"


def check_requests_equal_limits(tpu: TpuSpec) -> list[Violation]:
    found = []
    for request in tpu.chips:  # one per TPU container, in order
        if request.agreed:
            continue  # one of the two set, or both the same amount: read once, in podspec
        container = request.container
        asked, limit = container.requests[TPU_RESOURCE], container.limits[TPU_RESOURCE]
        if quantity(asked) is not None and quantity(asked) != quantity(limit):
            found.append(
                invalid(
                    "tpu.requests-limits-differ",
                    container.resource_path("limits", TPU_RESOURCE),
                    _as_number(limit),
                    f"must equal requests[{TPU_RESOURCE}] ({shown(asked)}); a Pod runs all chips "
                    "of its host, set both to the same count",
                )
            )
    return found


def check_single_tpu_container(tpu: TpuSpec, catalog: Catalog) -> list[Violation]:
    apps = tpu.app_chips
    if len(apps) < 2:
        return []  # the common case: one TPU container
    accelerator = known_accelerator(tpu, catalog)
    if accelerator is None or accelerator.multiple_tpu_containers:
        return []
    first = apps[0]
    return [
        forbidden(
            "tpu.multiple-tpu-containers",
            r.field,
            f"only one container may request {TPU_RESOURCE} on {accelerator.name} "
            f"({first.container.path} requests {shown(first.value)}); move the chips to one "
            "container",
        )
        for r in apps[1:]
    ]


def _as_number(value: object) -> object:
    """A whole quantity prints as a number (`3`, as users wrote it), anything else as sent."""
    number = whole_number(value)
    return value if number is None else number
