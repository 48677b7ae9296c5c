"""What a pod spec says about TPUs: selectors, the containers that request chips, and the slice.

Reads objects exactly as sent; a field of the wrong type reads as absent here and is reported by
the rule that cares (never an exception).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.catalog.tpu import (
    ACCELERATOR_LABEL,
    COMPUTE_CLASS_LABEL,
    SLICE_TOPOLOGY_ANNOTATION,
    TOPOLOGY_LABEL,
    TPU_RESOURCE,
    Accelerator,
    Catalog,
    SliceShape,
    topology_dimensions,
)
from webhook.policy import affinity
from webhook.policy.affinity import AFFINITY_TERMS
from webhook.policy.bounds import MAX_CONTAINERS
from webhook.policy.paths import FieldPath, escape_pointer
from webhook.policy.quantities import quantity, whole_number

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
        return FieldPath((*self.at.parts, ("field", self.list_name), ("index", self.position)))

    def resources(self, which: str) -> Mapping[str, Any]:
        return self.requests if which == "requests" else self.limits

    def resource_path(self, which: str, name: str) -> FieldPath:
        """spec.containers[0].resources.limits[google.com/tpu]: built in one step (a message
        of most denials names one)."""
        steps = (("field", self.list_name), ("index", self.position), ("field", "resources"))
        return FieldPath((*self.at.parts, *steps, ("field", which), ("key", name)))

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
    at: FieldPath  # the pod spec
    pointer: str
    spec: Mapping[str, Any]
    meta_at: FieldPath  # the metadata of the Pod (template)
    annotations: Mapping[str, Any]
    accelerator_value: object  # None when absent, SEVERAL when affinity allows several
    topology_value: object  # the node pool's slice (selector)
    slice_value: object  # the workload's slice (annotation); None when absent
    from_affinity: Mapping[str, tuple[int, int]]  # label -> (term, expression) it was read from
    containers: tuple[Container, ...]  # every container, app containers first
    chips: tuple[ChipRequest, ...]  # app containers first, then init containers
    tpu_containers: tuple[Container, ...]  # those of `chips`, each once
    app_chips: tuple[ChipRequest, ...]  # those of `chips` on app containers
    unread_containers: int = 0  # beyond MAX_CONTAINERS: neither checked nor patched
    compute_class: object = None  # a GKE ComputeClass it selects (SEVERAL: one of several)

    @property
    def selector(self) -> FieldPath:
        return self.at.child("nodeSelector")

    def label_field(self, label: str) -> FieldPath:
        """Where a TPU label was read from (nodeSelector, or the node-affinity term)."""
        source = self.from_affinity.get(label)
        if source is None:
            return self.selector.key(label)
        term, expression = source
        return (
            self.at.child(*AFFINITY_TERMS)
            .index(term)
            .child("matchExpressions")
            .index(expression)
            .child("values")
        )

    @property
    def slice_field(self) -> FieldPath:
        return self.meta_at.child("annotations").key(SLICE_TOPOLOGY_ANNOTATION)

    @property
    def topology(self) -> object:
        """The slice the workload runs: the annotation, else the topology selector."""
        return self.topology_value if self.slice_value is None else self.slice_value

    def chips_per_pod(self, split: bool = False) -> int | None:
        """The chips one Pod runs: what the (first) TPU container asks for; with `split` (an
        accelerator whose host's chips may be shared by several containers) their sum."""
        if split:
            apps = self.app_chips
            if len(apps) > 1:
                total = 0
                for request in apps:
                    if request.chips is None:
                        return None
                    total += request.chips
                return total
        for request in self.chips:
            if request.chips is not None:
                return request.chips
        return None

    @property
    def host_network(self) -> bool:
        return self.spec.get("hostNetwork") is True


def read_tpu_spec(
    spec: object,
    at: FieldPath,
    pointer: str,
    metadata: object = None,
    meta_at: FieldPath | None = None,
) -> TpuSpec | None:
    """The TPU view of a pod spec (at `at`, JSON Pointer `pointer`, its Pod metadata at
    `meta_at`); None when it is not a TPU workload (the fast path)."""
    if not isinstance(spec, dict):
        return None
    selector = spec.get("nodeSelector")
    if not isinstance(selector, dict):
        selector = {}
    required = spec.get("affinity")
    if (
        ACCELERATOR_LABEL not in selector
        and TOPOLOGY_LABEL not in selector
        and not _asks_chips(spec)
        and (required is None or not affinity.names_tpu(spec))
        and not spec.get("resourceClaims")  # DRA: the claims say (policy/claims.py)
    ):
        return None  # before any container is read: most Pods of a cluster end here
    found, unread = _containers(spec, at, pointer)
    chips = _chip_requests(found)
    tpu_containers: list[Container] = []
    apps: list[ChipRequest] = []
    for request in chips:  # one per container: each container once, in order, no search
        tpu_containers.append(request.container)
        if not request.container.init:
            apps.append(request)
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(annotations, dict):
        annotations = NO_ANNOTATIONS
    accelerator, topology, compute_class, sources = _selected(spec, selector, required)
    return TpuSpec(
        at,
        pointer,
        spec,
        meta_at if meta_at is not None else at.child("metadata"),
        annotations,
        accelerator,
        topology,
        annotations.get(SLICE_TOPOLOGY_ANNOTATION),
        sources,
        tuple(found),
        tuple(chips),
        tuple(tpu_containers),
        tuple(apps),
        unread,
        compute_class,
    )


def _selected(
    spec: Mapping[str, Any], selector: Mapping[str, Any], required: object
) -> tuple[object, object, object, dict[str, tuple[int, int]]]:
    """The accelerator, topology and ComputeClass a pod spec selects, by nodeSelector or else by
    its required node affinity, and where in the affinity each was found."""
    accelerator = selector.get(ACCELERATOR_LABEL)
    topology = selector.get(TOPOLOGY_LABEL)
    compute_class = selector.get(COMPUTE_CLASS_LABEL)
    sources: dict[str, tuple[int, int]] = NO_SOURCES
    if required is not None and (accelerator is None or topology is None):
        sources = {}
        if accelerator is None:
            accelerator = affinity.value_of(spec, ACCELERATOR_LABEL, sources)
        if topology is None:
            topology = affinity.value_of(spec, TOPOLOGY_LABEL, sources)
        if compute_class is None:
            compute_class = affinity.value_of(spec, COMPUTE_CLASS_LABEL, sources)
    return accelerator, topology, compute_class, sources


def _containers(
    spec: Mapping[str, Any], at: FieldPath, pointer: str
) -> tuple[list[Container], int]:
    """The containers and init containers, up to MAX_CONTAINERS in all, and how many were left
    unread. Loops rather than comprehensions here and in the mutation: on Python 3.11 each
    comprehension builds a function object and a frame, a measurable share of a review."""
    found: list[Container] = []
    room, unread = MAX_CONTAINERS, 0
    for list_name in CONTAINER_LISTS:
        items = spec.get(list_name)
        if isinstance(items, list):
            if len(items) > room:
                unread += len(items) - room
                items = items[:room]
            room -= len(items)
            for position, body in enumerate(items):
                if isinstance(body, dict):
                    found.append(Container(at, pointer, list_name, position, body))
    return found, unread


NO_ANNOTATIONS: Mapping[str, Any] = {}
NO_SOURCES: dict[str, tuple[int, int]] = {}  # never written: a fresh dict is made to record


def _asks_chips(spec: Mapping[str, Any]) -> bool:
    for list_name in CONTAINER_LISTS:
        items = spec.get(list_name)
        for body in items[:MAX_CONTAINERS] if isinstance(items, list) else ():
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
            agreed = other == value or quantity(other) == quantity(value)
            chips.append(ChipRequest(container, "limits", value, whole_number(value), agreed))
        elif TPU_RESOURCE in requests:
            value = requests[TPU_RESOURCE]
            chips.append(ChipRequest(container, "requests", value, whole_number(value)))
    return chips


def known_accelerator(tpu: TpuSpec, catalog: Catalog) -> Accelerator | None:
    value = tpu.accelerator_value  # the table itself, not catalog.accelerator(): read per rule
    return catalog.accelerators.get(value) if isinstance(value, str) else None


def slice_shape(tpu: TpuSpec, catalog: Catalog) -> SliceShape | None:
    """The slice this spec runs, when the catalog and the chip count say it unambiguously:
    the workload's slice (annotation) on hosts of the node pool's shape (selector)."""
    accelerator = known_accelerator(tpu, catalog)
    if accelerator is None:
        return None
    for request in tpu.chips:
        if not request.agreed:
            return None  # which count is meant is unknown: the mismatch is reported first
    options = slice_options(tpu, accelerator, catalog)
    chips = tpu.chips_per_pod(accelerator.multiple_tpu_containers)
    if chips is None:
        return options[0] if len(options) == 1 else None
    for shape in options:
        if shape.chips_per_host == chips:
            return shape
    return None


def slice_options(
    tpu: TpuSpec, accelerator: Accelerator, catalog: Catalog
) -> tuple[SliceShape, ...]:
    """The ways the catalog runs the workload's slice. A sub-slice (annotation and selector
    both set) runs on hosts of the node pool's shape only, and must fit in the pool."""
    pool = tpu.topology_value
    topology = pool if tpu.slice_value is None else tpu.slice_value  # tpu.topology, inlined
    if not isinstance(topology, str):
        return ()
    options = accelerator.shapes.get(topology, ())
    if tpu.slice_value is None or not isinstance(pool, str) or pool == topology:
        return options
    if not fits(topology, pool):
        return ()
    per_host = accelerator.chips_per_host.get(pool, ())
    kept = []
    for shape in options:
        if shape.chips_per_host in per_host:
            kept.append(shape)
    return tuple(kept)


def fits(part: str, whole: str) -> bool:
    """Whether a slice of topology `part` fits in one of topology `whole` (sides sorted)."""
    small, large = topology_dimensions(part), topology_dimensions(whole)
    if small is None or large is None or len(small) != len(large):
        return False
    return all(a <= b for a, b in zip(sorted(small), sorted(large), strict=True))
