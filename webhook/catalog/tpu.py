"""The TPU catalog, indexed once at start-up, and the Kubernetes names of everything TPU.

Every number a rule uses comes from here; every lookup a request makes is a dict hit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
# The workload's own slice, on the Pod (template) metadata: GKE dynamic slicing and sub-slicing.
# It wins over the topology selector, which then names the node pool's slice.
SLICE_TOPOLOGY_ANNOTATION = "cloud.google.com/gke-tpu-slice-topology"
# A GKE custom ComputeClass selected by a Pod: its priorities say which TPU nodes GKE makes.
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
# GKE's escape hatch from its own TPU admission check, honoured for ours too.
SKIP_CHECK_ANNOTATION = "cloud.google.com/skip-tpu-webhook-check"
TPU_RESOURCE = "google.com/tpu"
# GKE taints TPU nodes google.com/tpu=present:NoSchedule; a Pod that requests google.com/tpu gets
# the toleration from the API server (ExtendedResourceToleration), one that claims TPUs through
# DRA must carry it itself.
TPU_TAINT_KEY = "google.com/tpu"
TPU_TAINT_VALUE = "present"
TPU_WORKER_ID = "TPU_WORKER_ID"
TPU_WORKER_HOSTNAMES = "TPU_WORKER_HOSTNAMES"
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
# Kueue: a queued workload gets its ResourceFlavor's node labels when Kueue admits it.
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue Topology-Aware Scheduling on a pod template: each slice of this many Pods goes in one
# domain of the slice-required topology level (kubernetes-sigs/kueue apis/.../topology_types.go).
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
# The project's own opt-out, on an object (or its namespace): the webhook leaves it alone.
OPT_OUT_LABEL = "tpu-webhook.io/ignore"
HOST_NETWORK_DNS_POLICY = "ClusterFirstWithHostNet"
MAX_HOSTNAME_LENGTH = 63
# A label value (the TPU selectors, the slice annotation's value as a topology): a longer one
# matches no node, and nothing is computed on it.
MAX_LABEL_VALUE_LENGTH = 63
MAX_PORT_NAME_LENGTH = 15  # a container port's name is an IANA service name


@dataclass(frozen=True, slots=True)
class Port:
    name: str
    container_port: int


@dataclass(frozen=True, slots=True)
class MachineType:
    name: str
    chips: int
    cpu: Decimal | None  # None: no public figure; requests are not checked against it
    memory: Decimal | None
    cpu_text: str
    memory_text: str
    unconfirmed: frozenset[str] = frozenset()  # "cpu" / "memory": sources disagree


@dataclass(frozen=True, slots=True)
class SliceShape:
    """One way to run a topology: how many chips each host (Pod) runs, and how many hosts."""

    accelerator: str
    topology: str
    chips: int
    chips_per_host: int
    hosts: int
    machine: MachineType | None

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1

    def describe(self) -> str:
        """`2x2x4 = 16 chips at 4 per host needs 4 hosts`."""
        hosts = "1 host" if self.hosts == 1 else f"{self.hosts} hosts"
        return (
            f"{self.topology} = {self.chips} chips at {self.chips_per_host} per host needs {hosts}"
        )


@dataclass(frozen=True, slots=True)
class Accelerator:
    name: str
    generation: str
    dimensions: int
    machine_types: tuple[MachineType, ...]
    single_host: tuple[str, ...]
    multi_host: tuple[str, ...]
    multi_host_chips_per_host: int | None
    multiple_of: int | None
    max_chips: int | None
    multiple_tpu_containers: bool
    shapes: Mapping[str, tuple[SliceShape, ...]] = field(repr=False)
    # Names people write for this accelerator (`tpu-v6e`, `v5e`, `ironwood`): near misses.
    aliases: tuple[str, ...] = ()
    # The slice may be given by the slice-topology annotation alone (GKE dynamic slicing).
    dynamic_slicing: bool = False
    chips_per_host: Mapping[str, tuple[int, ...]] = field(repr=False, default_factory=dict)
    dra_generation: str | None = None  # the DRA driver's `tpuGen` for its chips
    # xpk's device types `<prefix>-<TensorCores>` (`v5p-128`: 64 chips at 2 cores per chip)
    xpk_prefix: str = ""
    xpk_cores_per_chip: int = 1

    @property
    def example_topology(self) -> str:
        return (self.multi_host or self.single_host)[0]

    def offered(self) -> str:
        """`1x1, 2x2, 2x4, 4x4, ...` plus the dimension rule, for messages."""
        listed = ", ".join(dict.fromkeys((*self.single_host, *self.multi_host)))
        if self.multiple_of is None:
            return listed
        return (
            f"{listed}, or any {'x'.join('ABC'[: self.dimensions])} with "
            f"{' <= '.join('ABC'[: self.dimensions])} and every dimension a "
            f"multiple of {self.multiple_of} up to {self.max_chips} chips"
        )


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions, swaps."""
    previous, current = list(range(len(b) + 1)), [0] * (len(b) + 1)
    before: list[int] = []
    for i, char in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, other in enumerate(b, 1):
            cost = char != other
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and char == b[j - 2] and a[i - 2] == other:
                current[j] = min(current[j], before[j - 2] + 1)
        before, previous = previous, current
    return previous[len(b)]


_GENERATION = re.compile(r"\d+[a-z]?")


def generation_mark(text: str) -> str:
    """The digits of a label and the letter right after them: `tpu-v5e-slice` -> `5e`,
    `tpu-v5p-slice` -> `5p`, `tpu-v4-podslice` -> `4`, `tpu7x` -> `7x`. Two labels with other
    marks belong to other generations: one is never a typo of the other."""
    found = _GENERATION.search(text)
    return found.group(0) if found else ""


def _squeezed(text: str) -> str:
    """Lowercase without separators: `TPU_v6e`, `tpu-v6e` and `tpu v6e` read alike."""
    return re.sub(r"[-_. ]", "", text.lower())


def topology_dimensions(topology: str) -> tuple[int, ...] | None:
    """`"2x2x4"` -> (2, 2, 4); None when malformed."""
    if len(topology) > MAX_LABEL_VALUE_LENGTH:
        return None
    parts = topology.split("x")
    if not all(part.isdigit() and part[0] != "0" for part in parts) or len(parts) not in (2, 3):
        return None
    return tuple(int(part) for part in parts)


@dataclass(frozen=True, slots=True)
class DraDriver:
    """GKE's TPU DRA driver: its name, the DeviceClasses that select it, the device attributes
    its ResourceSlices publish."""

    driver: str
    device_classes: frozenset[str]
    attributes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Autopilot:
    """What GKE Autopilot (its Warden admission) certainly refuses of a Pod."""

    disallowed_node_selectors: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Catalog:
    accelerators: Mapping[str, Accelerator]
    ports: tuple[Port, ...]
    unverified: frozenset[str]
    _near_misses: Mapping[str, str] = field(repr=False)  # squeezed alias or machine type -> label
    _spellings: tuple[tuple[str, str], ...] = field(repr=False, default=())  # (lowercase, label)
    dra: DraDriver | None = None
    autopilot: Autopilot = Autopilot()

    def accelerator(self, name: str) -> Accelerator | None:
        return self.accelerators.get(name)

    def shapes(self, accelerator: Accelerator, topology: str) -> tuple[SliceShape, ...]:
        return accelerator.shapes.get(topology, ())

    def near_miss(self, value: str) -> str | None:
        """The known label `value` most likely meant, if it is surely a mistake for one: a name
        people use for a generation (`tpu-v6e`, `tpu-v5e-slice`), a machine type used as the
        label, or a typo a character or two from a label or one of those names that keeps the
        generation's mark (`tpu-v5e-...` is never taken for `tpu-v5p-slice`). A label of an
        unknown generation (`tpu-v9-slice`, `tpu8`) may be a newer one, never a mistake.
        """
        if value in self.unverified or len(value) > MAX_LABEL_VALUE_LENGTH:
            return None  # no label that long: not a typo (and no edit distance on it)
        known = self._near_misses.get(_squeezed(value))
        if known is not None:
            return known
        wanted = value.lower()
        mark = generation_mark(wanted)
        scored = sorted(
            (edit_distance(wanted, spelling), label)
            for spelling, label in self._spellings
            if generation_mark(spelling) == mark
        )
        if scored and scored[0][0] <= (1 if len(wanted) < 10 else 2):
            return scored[0][1]
        return None

    def is_machine_type(self, value: str) -> bool:
        return self.machine(value) is not None

    def machine(self, name: str) -> tuple[Accelerator, MachineType] | None:
        """The accelerator a machine type (`ct6e-standard-4t`) belongs to, and the machine."""
        for accelerator in self.accelerators.values():
            for machine in accelerator.machine_types:
                if machine.name == name:
                    return accelerator, machine
        return None

    def names(self) -> str:
        return ", ".join(self.accelerators)


def build_accelerator(
    name: str,
    generation: str,
    dimensions: int,
    machine_types: Iterable[MachineType],
    single_host: Iterable[str],
    multi_host: Iterable[str] = (),
    multi_host_chips_per_host: int | None = None,
    multiple_of: int | None = None,
    max_chips: int | None = None,
    multiple_tpu_containers: bool = False,
    aliases: Iterable[str] = (),
    dynamic_slicing: bool = False,
    dra_generation: str | None = None,
    xpk_prefix: str = "",
    xpk_cores_per_chip: int = 1,
) -> Accelerator:
    """Index every (topology, chips per host) this accelerator can run."""
    machines = tuple(machine_types)
    by_chips = {m.chips: m for m in machines}
    singles, multis = tuple(single_host), tuple(multi_host)
    shapes: dict[str, list[SliceShape]] = {}
    for topology in singles:
        chips = _chips(topology)
        shapes.setdefault(topology, []).append(
            SliceShape(name, topology, chips, chips, 1, by_chips.get(chips))
        )
    per_host = multi_host_chips_per_host or 0
    ruled = _ruled_topologies(dimensions, multiple_of, max_chips) if per_host else ()
    for topology in dict.fromkeys((*multis, *ruled)):
        chips = _chips(topology)
        if per_host and chips % per_host == 0 and chips > per_host:
            shape = SliceShape(
                name, topology, chips, per_host, chips // per_host, by_chips.get(per_host)
            )
            shapes.setdefault(topology, []).append(shape)
    return Accelerator(
        name=name,
        generation=generation,
        dimensions=dimensions,
        machine_types=machines,
        single_host=singles,
        multi_host=multis,
        multi_host_chips_per_host=multi_host_chips_per_host,
        multiple_of=multiple_of,
        max_chips=max_chips,
        multiple_tpu_containers=multiple_tpu_containers,
        aliases=tuple(aliases),
        dynamic_slicing=dynamic_slicing,
        shapes={topology: tuple(options) for topology, options in shapes.items()},
        chips_per_host={
            topology: tuple(sorted({s.chips_per_host for s in options}))
            for topology, options in shapes.items()
        },
        dra_generation=dra_generation,
        xpk_prefix=xpk_prefix,
        xpk_cores_per_chip=xpk_cores_per_chip,
    )


def build_catalog(
    accelerators: Iterable[Accelerator],
    ports: Iterable[Port],
    unverified: Iterable[str] = (),
    dra: DraDriver | None = None,
    autopilot: Autopilot | None = None,
) -> Catalog:
    table = {a.name: a for a in accelerators}
    near: dict[str, str] = {}
    spellings: list[tuple[str, str]] = []
    for a in table.values():
        for other in (*a.aliases, *(m.name for m in a.machine_types), a.name):
            near[_squeezed(other)] = a.name
        spellings += [(name.lower(), a.name) for name in (a.name, *a.aliases)]
    return Catalog(
        table,
        tuple(ports),
        frozenset(unverified),
        near,
        tuple(spellings),
        dra,
        autopilot or Autopilot(),
    )


def _chips(topology: str) -> int:
    dims = topology_dimensions(topology)
    if dims is None:
        raise ValueError(f"malformed topology {topology!r}: expected AxB or AxBxC")
    return math.prod(dims)


def _ruled_topologies(dimensions: int, step: int | None, max_chips: int | None) -> list[str]:
    """Every non-decreasing AxB(xC) of multiples of `step` with at most `max_chips` chips."""
    if step is None or max_chips is None:
        return []

    def grow(prefix: tuple[int, ...], product: int) -> Iterable[tuple[int, ...]]:
        if len(prefix) == dimensions:
            yield prefix
            return
        side = prefix[-1] if prefix else step
        while product * side ** (dimensions - len(prefix)) <= max_chips:
            yield from grow((*prefix, side), product * side)
            side += step

    return ["x".join(map(str, dims)) for dims in grow((), 1)]
