"""The TPU shapes this cluster offers, and the workloads that ask for one it does not.

A TPU Pod runs only on a node whose `cloud.google.com/gke-tpu-accelerator` and
`cloud.google.com/gke-tpu-topology` labels equal its selectors. What the cluster can give is read
from what the API shows, as plain data (built once per read of the cluster, looked up per review):
- TPU Nodes' labels (and the node pool each belongs to);
- the TPU priorities of GKE ComputeClasses (the shapes GKE provisions for them);
- Kueue ResourceFlavors' `spec.nodeLabels`;
- xpk's `<cluster>-resources-configmap` (device types such as `v6e-16`, or an accelerator that
  node auto-provisioning creates in any topology);
- a list the administrator declares, which is also a policy: with `enforce`, a shape it does not
  list is refused.

What cannot be seen: a node pool that scales from zero leaves no Node, and node
auto-provisioning creates pools on demand. So a shape no source shows is only warned about,
naming what the cluster does offer and the nearest fit; only the declared list refuses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.catalog.tpu import (
    ACCELERATOR_LABEL,
    TOPOLOGY_LABEL,
    Catalog,
    topology_dimensions,
)
from webhook.policy.bounds import MAX_LABEL_VALUE
from webhook.policy.podspec import TpuSpec
from webhook.policy.violations import Violation, invalid, unsupported

CODE = "tpu.shape-not-offered"
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
KUEUE_GROUP = "kueue.x-k8s.io"
XPK_CONFIGMAP_SUFFIX = "-resources-configmap"
XPK_AUTOPROVISION = "AUTOPROVISION"  # xpk's value for an accelerator node auto-provisioning makes
# Places named for one shape in a message, and shapes named in one message: the rest counted.
MAX_PLACES_NAMED = 3
MAX_SHAPES_NAMED = 8
# xpk ConfigMap keys and ResourceFlavors read (a cluster has a handful).
MAX_ENTRIES = 256

Shape = tuple[str, str]  # (accelerator label, topology label)


@dataclass(frozen=True, slots=True)
class Declared:
    """One entry of the administrator's list: an accelerator, the topologies offered (none: any),
    and the namespaces it is offered to (none: every one)."""

    accelerator: str
    topologies: tuple[str, ...] = ()
    namespaces: frozenset[str] = frozenset()

    def offers(self, accelerator: str, topology: str | None, namespace: str) -> bool:
        if accelerator != self.accelerator:
            return False
        if self.namespaces and namespace not in self.namespaces:
            return False
        return not self.topologies or topology is None or topology in self.topologies

    def describe(self) -> str:
        shown = ", ".join(self.topologies) if self.topologies else "any topology"
        return f"{self.accelerator} {shown}"


@dataclass(frozen=True, slots=True)
class OfferPolicy:
    """The administrator's part: the declared list, whether it is enforced, and which sources
    of the cluster are read for offered shapes."""

    declared: tuple[Declared, ...] = ()
    enforce: bool = False
    nodes: bool = True
    compute_classes: bool = True
    resource_flavors: bool = True
    xpk: bool = True


NO_POLICY = OfferPolicy()


@dataclass(frozen=True, slots=True)
class Offered:
    # (accelerator, topology) -> where the cluster offers it ('node pool "v6e" (2 nodes)')
    shapes: Mapping[Shape, tuple[str, ...]] = field(default_factory=dict)
    # accelerator -> where the cluster offers it in any topology (auto-provisioning)
    any_topology: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    policy: OfferPolicy = NO_POLICY

    @property
    def known(self) -> bool:
        """Whether anything says what the cluster offers: without it, nothing is checked."""
        return bool(self.shapes or self.any_topology or self.policy.declared)

    def declared_for(self, namespace: str) -> list[Declared]:
        return [d for d in self.policy.declared if not d.namespaces or namespace in d.namespaces]

    def offers(self, accelerator: str, topology: str | None, namespace: str) -> bool:
        """Whether a workload of `namespace` selecting these labels finds them offered (a
        topology of None: any topology of the accelerator)."""
        if any(d.offers(accelerator, topology, namespace) for d in self.policy.declared):
            return True
        if accelerator in self.any_topology:
            return True
        if topology is not None:
            return (accelerator, topology) in self.shapes
        return any(shape[0] == accelerator for shape in self.shapes)

    def describe(self, namespace: str | None = None) -> str:
        """One line: `tpu-v6e-slice 2x4 (node pool "v6e" (1 node)); tpu-v6e-slice 4x4
        (declared)`."""
        parts = [
            f"{accelerator} {topology} ({_named(places)})"
            for (accelerator, topology), places in sorted(self.shapes.items())
        ]
        parts += [
            f"{a} in any topology ({_named(p)})" for a, p in sorted(self.any_topology.items())
        ]
        declared = self.policy.declared if namespace is None else self.declared_for(namespace)
        parts += [f"{d.describe()} (declared)" for d in declared]
        if not parts:
            return "nothing tpu-webhook can see"
        more = len(parts) - MAX_SHAPES_NAMED
        return "; ".join(parts[:MAX_SHAPES_NAMED]) + (f"; and {more} more" if more > 0 else "")


NOTHING = Offered()


def offered_of(
    objects: Iterable[Mapping[str, Any]],
    compute_classes: Iterable[Any] = (),
    catalog: Catalog | None = None,
    policy: OfferPolicy = NO_POLICY,
) -> Offered:
    """What the objects (Nodes, ResourceFlavors, xpk ConfigMaps; any others are skipped) and the
    ComputeClasses' TPU priorities offer, under the administrator's policy."""
    pools: Counter[tuple[str, str, str]] = Counter()
    places: dict[Shape, list[str]] = {}
    anywhere: dict[str, list[str]] = {}
    for obj in objects:
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
        if kind == "Node" and policy.nodes:
            found = _node_shape(obj)
            if found is not None:
                pools[found] += 1
        elif kind == "ResourceFlavor" and group == KUEUE_GROUP and policy.resource_flavors:
            _flavor(obj, places, anywhere)
        elif kind == "ConfigMap" and catalog is not None and policy.xpk:
            _xpk(obj, catalog, places, anywhere)
    for (accelerator, topology, pool), count in sorted(pools.items()):
        nodes = f"{count} node{'s' if count != 1 else ''}"
        place = f'node pool "{pool}" ({nodes})' if pool else f"{nodes} outside a node pool"
        places.setdefault((accelerator, topology), []).append(place)
    for known in compute_classes if policy.compute_classes else ():
        for p in known.tpu:
            where = f'ComputeClass "{known.name}" priority {p.index + 1}'
            places.setdefault((p.accelerator, p.topology), []).append(where)
    return Offered(
        {shape: tuple(found) for shape, found in places.items()},
        {accelerator: tuple(found) for accelerator, found in anywhere.items()},
        policy,
    )


def check(tpu: TpuSpec, offered: Offered, namespace: str, catalog: Catalog) -> list[Violation]:
    """A TPU pod spec whose selectors no offered shape matches: a warning (a denial when the
    declared list is enforced and does not list it)."""
    accelerator, topology = tpu.accelerator_value, tpu.topology_value
    if not isinstance(accelerator, str) or tpu.compute_class is not None:
        return []  # no single TPU type selected, or GKE provisions it from the class
    if topology is not None and not isinstance(topology, str):
        return []  # several topologies allowed by affinity
    declared = offered.declared_for(namespace)
    refuse = offered.policy.enforce and bool(declared)
    if refuse:  # the administrator's list is the policy: what the Nodes show does not widen it
        if any(d.offers(accelerator, topology, namespace) for d in declared):
            return []
    elif not offered.known or offered.offers(accelerator, topology, namespace):
        return []
    nearest = _nearest(accelerator, topology, offered, namespace, refuse)
    same_type = nearest is not None and nearest[0] == accelerator and topology is not None
    where = tpu.label_field(TOPOLOGY_LABEL if same_type else ACCELERATOR_LABEL)
    value = topology if same_type else accelerator
    asked = f"{accelerator} {topology}" if topology is not None else accelerator
    fit = f"; the nearest fit offered is {nearest[0]} {nearest[1]}" if nearest else ""
    if refuse:
        detail = (
            f"{asked} is not among the TPU shapes the cluster administrator declared for "
            f"namespace {namespace}: {', '.join(d.describe() for d in declared)}{fit}; select "
            "one of them (or ask for the shape to be added)"
        )
        return [unsupported(CODE, where, value, detail)]
    detail = (
        f"this cluster shows no {asked} nodes; it offers {offered.describe(namespace)}{fit}. "
        "The Pods stay Pending unless a node pool of this shape scales up from zero or is "
        f"auto-provisioned, which tpu-webhook cannot see{_guide(catalog, accelerator)}"
    )
    return [invalid(CODE, where, value, detail, advisory=True)]


def _guide(catalog: Catalog, accelerator: str) -> str:
    return "" if catalog.accelerator(accelerator) else " (and the TPU type is not in the catalog)"


def _nearest(
    accelerator: str, topology: str | None, offered: Offered, namespace: str, declared_only: bool
) -> Shape | None:
    """The offered shape closest to the one asked (of the declared list alone when it is
    enforced): the same accelerator first, then the nearest number of chips (the larger on a
    tie)."""
    candidates = [] if declared_only else list(offered.shapes)
    candidates += [
        (d.accelerator, t) for d in offered.declared_for(namespace) for t in d.topologies
    ]
    if not candidates:
        return None
    wanted = _chips(topology) if topology is not None else 0

    def distance(shape: Shape) -> tuple[int, int, int, str]:
        chips = _chips(shape[1])
        return (shape[0] != accelerator, abs(chips - wanted), -chips, shape[1])

    return min(candidates, key=distance)


def _chips(topology: str) -> int:
    dims = topology_dimensions(topology)
    product = 1
    for d in dims or (0,):
        product *= d
    return product


def _node_shape(node: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """A TPU Node's (accelerator, topology, node pool) from its labels."""
    metadata = node.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if not isinstance(labels, dict):
        return None
    accelerator, topology = labels.get(ACCELERATOR_LABEL), labels.get(TOPOLOGY_LABEL)
    pool = labels.get(NODE_POOL_LABEL)
    if not _label(accelerator) or not _label(topology):
        return None
    return str(accelerator), str(topology), str(pool) if _label(pool) else ""


def _flavor(
    flavor: Mapping[str, Any], places: dict[Shape, list[str]], anywhere: dict[str, list[str]]
) -> None:
    """A Kueue ResourceFlavor's node labels: the TPU nodes the workloads it admits run on."""
    metadata, spec = flavor.get("metadata"), flavor.get("spec")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    labels = spec.get("nodeLabels") if isinstance(spec, dict) else None
    if not isinstance(labels, dict) or not _label(name):
        return
    accelerator, topology = labels.get(ACCELERATOR_LABEL), labels.get(TOPOLOGY_LABEL)
    if not _label(accelerator):
        return
    where = f'ResourceFlavor "{name}"'
    if _label(topology):
        places.setdefault((str(accelerator), str(topology)), []).append(where)
    else:
        anywhere.setdefault(str(accelerator), []).append(where)


def _xpk(
    configmap: Mapping[str, Any],
    catalog: Catalog,
    places: dict[Shape, list[str]],
    anywhere: dict[str, list[str]],
) -> None:
    """xpk's `<cluster>-resources-configmap`: keys are device types (`v6e-16`: 16 chips of
    v6e; `v5p-128`: 128 TensorCores of v5p), `<prefix>-<topology>`, or an accelerator label
    whose value is AUTOPROVISION (node auto-provisioning makes any topology of it)."""
    metadata, data = configmap.get("metadata"), configmap.get("data")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name.endswith(XPK_CONFIGMAP_SUFFIX):
        return
    if not isinstance(data, dict):
        return
    where = f'xpk ConfigMap "{name}"'
    for key, value in list(data.items())[:MAX_ENTRIES]:
        if not isinstance(key, str) or len(key) > MAX_LABEL_VALUE:
            continue
        if value == XPK_AUTOPROVISION and catalog.accelerator(key) is not None:
            anywhere.setdefault(key, []).append(where)
            continue
        for shape in xpk_device_shapes(key, catalog):
            places.setdefault(shape, []).append(where)


def xpk_device_shapes(device: str, catalog: Catalog) -> list[Shape]:
    """The shapes an xpk device type names: `v6e-4x4`, or `v6e-16` (every topology of the
    accelerator with that many TensorCores); [] for one the catalog does not know."""
    prefix, _, size = device.rpartition("-")
    for accelerator in catalog.accelerators.values():
        if accelerator.xpk_prefix != prefix or not prefix:
            continue
        if size in accelerator.shapes:
            return [(accelerator.name, size)]
        if not size.isdigit():
            return []
        cores = int(size)
        return [
            (accelerator.name, topology)
            for topology in accelerator.shapes
            if _chips(topology) * accelerator.xpk_cores_per_chip == cores
        ]
    return []


def _label(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_LABEL_VALUE


def _named(places: tuple[str, ...]) -> str:
    more = len(places) - MAX_PLACES_NAMED
    return ", ".join(places[:MAX_PLACES_NAMED]) + (f", and {more} more" if more > 0 else "")
