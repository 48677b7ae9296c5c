"""What a pod spec says about TPUs: selectors, the containers that request chips, and the slice.

Reads objects exactly as sent; a field of the wrong type reads as absent here and is reported by
the rule that cares (never an exception).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
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
from webhook.policy.paths import FieldPath, escape_pointer

CONTAINER_LISTS = ("containers", "initContainers")


class Container:
    """One container of a pod spec. Its field path is built only when a message or a patch
    needs it: most reviews never do."""

    __slots__ = ("at", "body", "init", "limits", "list_name", "pointer_at", "position", "requests")

    def __init__(
        self, at: FieldPath, pointer_at: str, list_name: str, position: int, body: Mapping[str, Any]
    ) -> None:
        self.at = at  # the pod spec
        self.pointer_at = pointer_at  # the pod spec as a JSON Pointer
        self.list_name = list_name
        self.position = position
        self.body = body
        self.init = list_name == "initContainers"
        resources = body.get("resources")
        requests = resources.get("requests") if isinstance(resources, dict) else None
        limits = resources.get("limits") if isinstance(resources, dict) else None
        self.requests: Mapping[str, Any] = requests if isinstance(requests, dict) else {}
        self.limits: Mapping[str, Any] = limits if isinstance(limits, dict) else {}

    @property
    def path(self) -> FieldPath:
        """spec.containers[0]"""
        return self.at.child(self.list_name).index(self.position)

    def resources(self, which: str) -> Mapping[str, Any]:
        return self.requests if which == "requests" else self.limits

    def resource_path(self, which: str, name: str) -> FieldPath:
        return self.path.child("resources", which).key(name)

    def pointer(self, *names: str) -> str:
        """The JSON Pointer of this container, or of a field under it."""
        pointer = f"{self.pointer_at}/{self.list_name}/{self.position}"
        for name in names:
            pointer += "/" + escape_pointer(name)
        return pointer


@dataclass(slots=True)  # built per review: a frozen dataclass costs a setattr call per field
class ChipRequest:
    container: Container
    which: str  # "limits" when set there, else "requests"
    value: object  # as written
    chips: int | None  # None: not a whole, non-negative number
    agreed: bool = True  # False: requests and limits both set and different

    @property
    def field(self) -> FieldPath:
        """limits[google.com/tpu] (or requests[...]) of its container."""
        return self.container.resource_path(self.which, TPU_RESOURCE)


@dataclass(slots=True)  # built per review, never changed
class TpuSpec:
    at: FieldPath
    pointer: str
    spec: Mapping[str, Any]
    accelerator_value: object  # None when absent
    topology_value: object
    containers: tuple[Container, ...]  # every container, app containers first
    chips: tuple[ChipRequest, ...]  # app containers first, then init containers
    tpu_containers: tuple[Container, ...]  # those of `chips`, each once

    @property
    def selector(self) -> FieldPath:
        return self.at.child("nodeSelector")

    def chips_per_pod(self) -> int | None:
        """The chips one Pod runs: what the (first) TPU container asks for."""
        for request in self.chips:
            if request.chips is not None:
                return request.chips
        return None


def read_tpu_spec(spec: object, at: FieldPath, pointer: str) -> TpuSpec | None:
    """The TPU view of a pod spec (at `at`, JSON Pointer `pointer`); None when it is not a TPU
    workload (the fast path)."""
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
        return None  # before any container is read: most Pods of a cluster end here
    # Loops rather than comprehensions here and in the mutation: on Python 3.11 each
    # comprehension builds a function object and a frame, a measurable share of a review.
    found: list[Container] = []
    for list_name in CONTAINER_LISTS:
        items = spec.get(list_name)
        if isinstance(items, list):
            for position, body in enumerate(items):
                if isinstance(body, dict):
                    found.append(Container(at, pointer, list_name, position, body))
    chips = _chip_requests(found)
    tpu_containers: dict[Container, None] = {}  # each once, in order (a list's `in` is O(n))
    for request in chips:
        tpu_containers[request.container] = None
    return TpuSpec(
        at,
        pointer,
        spec,
        selector.get(ACCELERATOR_LABEL),
        selector.get(TOPOLOGY_LABEL),
        tuple(found),
        tuple(chips),
        tuple(tpu_containers),
    )


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


def _chip_requests(found: list[Container]) -> list[ChipRequest]:
    chips = []
    for container in found:
        requests, limits = container.requests, container.limits
        # limits first: the form Kubernetes accepts alone (requests default from it)
        if TPU_RESOURCE in limits:
            value = limits[TPU_RESOURCE]
            other = requests.get(TPU_RESOURCE, value)
            agreed = other is value or quantity(other) == quantity(value)
            chips.append(ChipRequest(container, "limits", value, whole_number(value), agreed))
        elif TPU_RESOURCE in requests:
            value = requests[TPU_RESOURCE]
            chips.append(ChipRequest(container, "requests", value, whole_number(value)))
    return chips


def whole_number(value: object) -> int | None:
    """The count a quantity is when it is a whole, non-negative number; None otherwise."""
    if type(value) is str and len(value) <= MEMO_LENGTH:
        return _remembered_whole_number(value)
    return _whole_number(value)


def quantity(value: object) -> Decimal | None:
    """The amount; +/-Infinity beyond the parser's range (larger than any VM); None if invalid."""
    if type(value) is str and len(value) <= MEMO_LENGTH:
        return _remembered_quantity(value)
    return _quantity(value)


def _whole_number(value: object) -> int | None:
    amount = quantity(value)
    if (
        amount is None
        or not amount.is_finite()
        or amount < 0
        or amount != amount.to_integral_value()
    ):
        return None
    return int(amount)


def _quantity(value: object) -> Decimal | None:
    try:
        return parse_quantity(value)
    except QuantityOutOfRange:
        return Decimal("-Infinity") if str(value).lstrip().startswith("-") else Decimal("Infinity")
    except QuantityError:
        return None


# Short strings are remembered: the API server writes quantities as strings, a cluster uses few
# ("4", "500Gi"), and a cache hit costs a tenth of a parse. Longer strings are parsed each time,
# so the caches never pin a large value.
MEMO_SIZE = 4096
MEMO_LENGTH = 32
_remembered_quantity = functools.lru_cache(maxsize=MEMO_SIZE)(_quantity)
_remembered_whole_number = functools.lru_cache(maxsize=MEMO_SIZE)(_whole_number)


def known_accelerator(tpu: TpuSpec, catalog: Catalog) -> Accelerator | None:
    value = tpu.accelerator_value
    return catalog.accelerator(value) if isinstance(value, str) else None


def slice_shape(tpu: TpuSpec, catalog: Catalog) -> SliceShape | None:
    """The slice this spec runs, when the catalog and the chip count say it unambiguously."""
    accelerator = known_accelerator(tpu, catalog)
    if accelerator is None or not isinstance(tpu.topology_value, str):
        return None
    for request in tpu.chips:
        if not request.agreed:
            return None  # which count is meant is unknown: the mismatch is reported first
    options = catalog.shapes(accelerator, tpu.topology_value)
    chips = tpu.chips_per_pod()
    if chips is None:
        return options[0] if len(options) == 1 else None
    for shape in options:
        if shape.chips_per_host == chips:
            return shape
    return None
