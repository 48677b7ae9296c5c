"""What the cluster holds that a decision may need, as plain read-only data: GKE ComputeClasses
(the TPU shapes a class provisions), the TPU requests of DRA claims and claim templates, and
which of those sources were read at all.

Built from the objects themselves, as the API server stores them: in the server by the cluster
watcher (webhook/cluster/), offline from the manifests and `--cluster-objects` files. A decision
reads one snapshot; nothing here waits for the API.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.catalog.tpu import Catalog
from webhook.policy.bounds import MAX_LABEL_VALUE, MAX_POD_TEMPLATES
from webhook.policy.claims import (
    CLAIM_KIND,
    CLAIM_TEMPLATE_KIND,
    DEVICE_CLASS_KIND,
    Claim,
    claim_of,
)
from webhook.policy.offered import NO_POLICY, NOTHING, Offered, OfferPolicy, offered_of

COMPUTE_CLASS_GROUP = "cloud.google.com"
COMPUTE_CLASS_KIND = "ComputeClass"


@dataclass(frozen=True, slots=True)
class TpuPriority:
    """One `spec.priorities[i].tpu` of a ComputeClass: the TPU nodes GKE provisions for it."""

    index: int  # its place in spec.priorities
    accelerator: str  # tpu.type: the accelerator label of the nodes (tpu-v6e-slice)
    topology: str  # tpu.topology: the slice (2x4)
    chips: int | None  # tpu.count: chips per node; None when not given

    def describe(self) -> str:
        """`priority 2 (tpu-v5-lite-podslice 2x4, 8 chips per node)`."""
        chips = "" if self.chips is None else f", {self.chips} chips per node"
        return f"priority {self.index + 1} ({self.accelerator} {self.topology}{chips})"


@dataclass(frozen=True, slots=True)
class ComputeClass:
    name: str
    tpu: tuple[TpuPriority, ...]  # its TPU priorities, in order
    # priorities that name no TPU shape (machine families, node pools by name): nodes whose TPUs,
    # if any, are not known from the class
    opaque: int


@dataclass(frozen=True, slots=True)
class Runtime:
    """A Kubeflow Trainer ClusterTrainingRuntime or TrainingRuntime: the JobSet its TrainJobs
    get (`spec.template.spec`, as written) and its default number of nodes."""

    jobset: Mapping[str, Any]
    num_nodes: object  # spec.mlPolicy.numNodes, as written


TRAINER_GROUP = "trainer.kubeflow.org"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")


@dataclass(frozen=True, slots=True)
class ClusterView:
    compute_classes: Mapping[str, ComputeClass] = field(default_factory=dict)
    # (kind, namespace, name) -> the TPU requests of a ResourceClaimTemplate or ResourceClaim
    claims: Mapping[tuple[str, str, str], Claim] = field(default_factory=dict)
    # the DeviceClasses that select GKE's TPU DRA driver (the catalog's, and the cluster's own)
    tpu_device_classes: frozenset[str] = frozenset()
    # (kind, namespace or "", name) -> a Kubeflow Trainer runtime
    runtimes: Mapping[tuple[str, str, str], Runtime] = field(default_factory=dict)
    # the kinds that were read ("ComputeClass"): a name absent from a kind read is not there;
    # from a kind not read, it is not known
    read: frozenset[str] = frozenset()
    # the cluster is GKE Autopilot (it serves Autopilot's auto.gke.io API)
    autopilot: bool = False
    # the TPU shapes the cluster offers (its TPU Nodes, ComputeClasses, ResourceFlavors, xpk's
    # ConfigMap, the administrator's list)
    offered: Offered = NOTHING

    def compute_class(self, name: str) -> ComputeClass | None:
        return self.compute_classes.get(name)

    def claim(self, kind: str, namespace: str, name: str) -> Claim | None:
        return self.claims.get((kind, namespace, name))

    def runtime(self, kind: str, namespace: str, name: str) -> Runtime | None:
        """A TrainingRuntime of the namespace, or a ClusterTrainingRuntime (namespace "")."""
        scope = "" if kind == "ClusterTrainingRuntime" else namespace
        return self.runtimes.get((kind, scope, name))


EMPTY = ClusterView()
# The kinds a view is built from (what `--cluster-objects` and the cluster watcher read).
CLUSTER_KINDS = (
    COMPUTE_CLASS_KIND,
    CLAIM_TEMPLATE_KIND,
    CLAIM_KIND,
    DEVICE_CLASS_KIND,
    *RUNTIME_KINDS,
    "Node",
    "ResourceFlavor",
    "ConfigMap",
)


def view_of(
    objects: Iterable[Mapping[str, Any]],
    read: Iterable[str] = (),
    dra_classes: Iterable[str] = (),
    dra_driver: str = "",
    namespace: str = "default",
    catalog: Catalog | None = None,
    offer: OfferPolicy = NO_POLICY,
) -> ClusterView:
    """The view of the cluster objects given (any kinds: those it does not use are skipped);
    `read` names kinds read in full even when none of their objects is given; `dra_classes`
    and `dra_driver` are the catalog's TPU DeviceClasses and driver; `namespace` is where a
    claim without one is; `catalog` reads xpk's device types, `offer` is the administrator's
    say on the shapes offered."""
    given = list(objects)
    classes: dict[str, ComputeClass] = {}
    tpu_classes = set(dra_classes)
    for obj in given:
        if is_compute_class(obj):
            parsed = compute_class_of(obj)
            if parsed is not None:
                classes[parsed.name] = parsed
        elif obj.get("kind") == DEVICE_CLASS_KIND and dra_driver and _selects(obj, dra_driver):
            metadata = obj.get("metadata")
            name = metadata.get("name") if isinstance(metadata, dict) else None
            if isinstance(name, str) and name:
                tpu_classes.add(name)
    claims: dict[tuple[str, str, str], Claim] = {}
    runtimes: dict[tuple[str, str, str], Runtime] = {}
    frozen = frozenset(tpu_classes)
    for obj in given:
        claim = claim_of(obj, frozen)
        if claim is not None and claim.requests:
            claims[(claim.kind, claim.namespace or namespace, claim.name)] = claim
        found = runtime_of(obj, namespace)
        if found is not None:
            runtimes[found[0]] = found[1]
    offered = offered_of(given, classes.values(), catalog, offer)
    return ClusterView(classes, claims, frozen, runtimes, frozenset(read), offered=offered)


def runtime_of(
    obj: Mapping[str, Any], namespace: str = "default"
) -> tuple[tuple[str, str, str], Runtime] | None:
    """A Trainer runtime object's key and view; None for any other object."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if kind not in RUNTIME_KINDS or not isinstance(api_version, str):
        return None
    if api_version.rpartition("/")[0] != TRAINER_GROUP:
        return None
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    name, scope = metadata.get("name"), metadata.get("namespace")
    spec = obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    template = spec.get("template")
    jobset = template.get("spec") if isinstance(template, dict) else None
    policy = spec.get("mlPolicy")
    if not isinstance(name, str) or not name or not isinstance(jobset, dict):
        return None
    if kind == "ClusterTrainingRuntime":
        scope = ""
    elif not isinstance(scope, str) or not scope:
        scope = namespace
    num_nodes = policy.get("numNodes") if isinstance(policy, dict) else None
    return (str(kind), scope, name), Runtime(jobset, num_nodes)


def view_for(
    catalog: Catalog,
    objects: Iterable[Mapping[str, Any]],
    read: Iterable[str] = (),
    offer: OfferPolicy = NO_POLICY,
) -> ClusterView:
    """view_of, with the catalog's TPU DRA driver and DeviceClasses."""
    dra = catalog.dra
    classes, driver = (dra.device_classes, dra.driver) if dra else ((), "")
    return view_of(objects, read, classes, driver, catalog=catalog, offer=offer)


def _selects(device_class: Mapping[str, Any], driver: str) -> bool:
    """Whether a DeviceClass's selectors name the driver (`device.driver == "tpu.google.com"`)."""
    spec = device_class.get("spec")
    selectors = spec.get("selectors") if isinstance(spec, dict) else None
    for selector in selectors[:MAX_POD_TEMPLATES] if isinstance(selectors, list) else ():
        cel = selector.get("cel") if isinstance(selector, dict) else None
        expression = cel.get("expression") if isinstance(cel, dict) else None
        if isinstance(expression, str) and f'"{driver}"' in expression[:4096]:
            return True
    return False


def is_compute_class(obj: Mapping[str, Any]) -> bool:
    api_version = obj.get("apiVersion")
    return (
        obj.get("kind") == COMPUTE_CLASS_KIND
        and isinstance(api_version, str)
        and api_version.rpartition("/")[0] == COMPUTE_CLASS_GROUP
    )


def compute_class_of(obj: Mapping[str, Any]) -> ComputeClass | None:
    """A ComputeClass object's TPU priorities (`spec.priorities[i].tpu: {type, count,
    topology}`); None without a name."""
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        return None
    spec = obj.get("spec")
    priorities = spec.get("priorities") if isinstance(spec, dict) else None
    tpu: list[TpuPriority] = []
    opaque = 0
    for index, priority in enumerate(
        priorities[:MAX_POD_TEMPLATES] if isinstance(priorities, list) else ()
    ):
        found = _tpu_priority(index, priority)
        if found is None:
            opaque += 1
        else:
            tpu.append(found)
    return ComputeClass(name, tuple(tpu), opaque)


def _tpu_priority(index: int, priority: object) -> TpuPriority | None:
    block = priority.get("tpu") if isinstance(priority, dict) else None
    if not isinstance(block, dict):
        return None
    accelerator, topology, count = block.get("type"), block.get("topology"), block.get("count")
    if not isinstance(accelerator, str) or not isinstance(topology, str):
        return None
    if len(accelerator) > MAX_LABEL_VALUE or len(topology) > MAX_LABEL_VALUE:
        return None
    chips = count if isinstance(count, int) and not isinstance(count, bool) else None
    return TpuPriority(index, accelerator, topology, chips)
