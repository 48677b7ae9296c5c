"""What a pod spec says about TPUs: selectors, the containers that request chips, and the slice.

Reads objects exactly as sent; a field of the wrong type reads as absent here and is reported by
the rule that cares (never an exception).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from webhook.catalog.quantity import QuantityError, QuantityOutOfRange, parse_quantity
from webhook.catalog.tpu import (
    ACCELERATOR_LABEL,
    TOPOLOGY_LABEL,
    TPU_RESOURCE,
    Accelerator,
    Catalog,
    SliceShape,
)
from webhook.policy.paths import FieldPath

CONTAINER_LISTS = ("containers", "initContainers")


@dataclass(frozen=True, slots=True)
class Container:
    path: FieldPath  # spec.containers[0]
    body: Mapping[str, Any]
    init: bool = False

    def resources(self, which: str) -> Mapping[str, Any]:
        resources = self.body.get("resources")
        found = resources.get(which) if isinstance(resources, dict) else None
        return found if isinstance(found, dict) else {}

    def resource_path(self, which: str, name: str) -> FieldPath:
        return self.path.child("resources", which).key(name)


@dataclass(frozen=True, slots=True)
class ChipRequest:
    container: Container
    field: FieldPath  # limits[google.com/tpu] when set, else requests[google.com/tpu]
    value: object  # as written
    chips: int | None  # None: not a whole, non-negative number
    agreed: bool = True  # False: requests and limits both set and different


@dataclass(frozen=True, slots=True)
class TpuSpec:
    at: FieldPath
    spec: Mapping[str, Any]
    accelerator_value: object  # None when absent
    topology_value: object
    chips: tuple[ChipRequest, ...]  # app containers first, then init containers

    @property
    def selector(self) -> FieldPath:
        return self.at.child("nodeSelector")

    def chips_per_pod(self) -> int | None:
        """The chips one Pod runs: what the (first) TPU container asks for."""
        counts = [c.chips for c in self.chips if c.chips is not None]
        return counts[0] if counts else None

    def tpu_containers(self) -> list[Container]:
        seen: dict[FieldPath, Container] = {}
        for request in self.chips:
            seen.setdefault(request.container.path, request.container)
        return list(seen.values())


def containers(spec: Mapping[str, Any], at: FieldPath) -> Iterator[Container]:
    for list_name in CONTAINER_LISTS:
        items = spec.get(list_name)
        if not isinstance(items, list):
            continue
        for position, body in enumerate(items):
            if isinstance(body, dict):
                path = at.child(list_name).index(position)
                yield Container(path, body, init=list_name == "initContainers")


def read_tpu_spec(spec: object, at: FieldPath) -> TpuSpec | None:
    """The TPU view of a pod spec; None when it is not a TPU workload (the fast path)."""
    if not isinstance(spec, dict):
        return None
    selector = spec.get("nodeSelector")
    if not isinstance(selector, dict):
        selector = {}
    if (
        ACCELERATOR_LABEL not in selector
        and TOPOLOGY_LABEL not in selector
        and not _asks_chips(spec)
    ):
        return None  # before any field path is built: most Pods of a cluster end here
    chips = tuple(_chip_requests(spec, at))
    return TpuSpec(at, spec, selector.get(ACCELERATOR_LABEL), selector.get(TOPOLOGY_LABEL), chips)


def _asks_chips(spec: Mapping[str, Any]) -> bool:
    for list_name in CONTAINER_LISTS:
        items = spec.get(list_name)
        for body in items if isinstance(items, list) else ():
            resources = body.get("resources") if isinstance(body, dict) else None
            if isinstance(resources, dict) and any(
                isinstance(r, dict) and TPU_RESOURCE in r
                for r in (resources.get("requests"), resources.get("limits"))
            ):
                return True
    return False


def _chip_requests(spec: Mapping[str, Any], at: FieldPath) -> Iterator[ChipRequest]:
    for container in containers(spec, at):
        requests, limits = container.resources("requests"), container.resources("limits")
        # limits first: the form Kubernetes accepts alone (requests default from it)
        which = "limits" if TPU_RESOURCE in limits else "requests"
        source = requests if which == "requests" else limits
        if TPU_RESOURCE in source:
            value = source[TPU_RESOURCE]
            field = container.resource_path(which, TPU_RESOURCE)
            other = requests.get(TPU_RESOURCE, value) if which == "limits" else value
            agreed = quantity(other) == quantity(value)
            yield ChipRequest(container, field, value, whole_number(value), agreed)


def whole_number(value: object) -> int | None:
    amount = quantity(value)
    if (
        amount is None
        or not amount.is_finite()
        or amount < 0
        or amount != amount.to_integral_value()
    ):
        return None
    return int(amount)


def quantity(value: object) -> Decimal | None:
    """The amount; +/-Infinity beyond the parser's range (larger than any VM); None if invalid."""
    try:
        return parse_quantity(value)
    except QuantityOutOfRange:
        return Decimal("-Infinity") if str(value).lstrip().startswith("-") else Decimal("Infinity")
    except QuantityError:
        return None


def known_accelerator(tpu: TpuSpec, catalog: Catalog) -> Accelerator | None:
    value = tpu.accelerator_value
    return catalog.accelerator(value) if isinstance(value, str) else None


def slice_shape(tpu: TpuSpec, catalog: Catalog) -> SliceShape | None:
    """The slice this spec runs, when the catalog and the chip count say it unambiguously."""
    accelerator = known_accelerator(tpu, catalog)
    if accelerator is None or not isinstance(tpu.topology_value, str):
        return None
    if not all(c.agreed for c in tpu.chips):
        return None  # which count is meant is unknown: the mismatch is reported first
    options = catalog.shapes(accelerator, tpu.topology_value)
    chips = tpu.chips_per_pod()
    if chips is not None:
        return next((s for s in options if s.chips_per_host == chips), None)
    return options[0] if len(options) == 1 else None
