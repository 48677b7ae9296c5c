"""TPUs handed out through Dynamic Resource Allocation (GKE Standard >= 1.34): claims of the TPU
DeviceClass, and the Pods that use them.

A Pod's `spec.resourceClaims` name a ResourceClaimTemplate (or a ResourceClaim) whose requests
ask DeviceClass `tpu.google.com`; the Pod has no `google.com/tpu` and, often, no TPU selector.
GKE's TPU DRA driver allocates whole nodes (`allocationMode: All`), and its devices carry the
attributes the catalog lists (`accelerator`, `tpuGen`, `topology`, `chipCount`...). A claim's
CEL selectors are read for the shape where they are plain comparisons
(`device.attributes["tpu.google.com"].topology == "2x4"`, joined by `&&`); a Pod that uses a TPU
claim is then a TPU workload like any other, with the chips of its node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from webhook.catalog.tpu import TPU_TAINT_KEY, TPU_TAINT_VALUE, Catalog, edit_distance
from webhook.policy.bounds import MAX_CONTAINERS, MAX_LABEL_VALUE, MAX_POD_TEMPLATES
from webhook.policy.paths import FieldPath
from webhook.policy.podspec import ChipRequest, TpuSpec
from webhook.policy.violations import Violation, invalid, required

CLAIM_TEMPLATE_KIND = "ResourceClaimTemplate"
CLAIM_KIND = "ResourceClaim"
DEVICE_CLASS_KIND = "DeviceClass"
ALL = "All"
EXACT_COUNT = "ExactCount"
# A CEL expression read for its comparisons: longer ones are not read (their attribute names
# are still looked up, up to the same length).
MAX_EXPRESSION = 4096


@dataclass(frozen=True, slots=True)
class Selector:
    expression: str
    field: FieldPath
    equals: Mapping[str, object] | None  # attribute -> value it must equal; None: not read


@dataclass(frozen=True, slots=True)
class TpuRequest:
    """One request of a claim for the TPU DeviceClass."""

    name: str
    field: FieldPath  # the request (its `exactly`, or the request itself in v1beta1)
    mode: str  # All or ExactCount (the default)
    count: object  # as written, for ExactCount
    selectors: tuple[Selector, ...]

    def wanted(self) -> Mapping[str, object]:
        """What its selectors pin: attribute -> value (a value pinned twice differently is
        kept as the first; such a claim is never allocated and its selectors say so)."""
        found: dict[str, object] = {}
        for selector in self.selectors:
            for name, value in (selector.equals or {}).items():
                found.setdefault(name, value)
        return found


class Claim(NamedTuple):
    """A ResourceClaimTemplate's or ResourceClaim's TPU requests."""

    kind: str  # ResourceClaimTemplate or ResourceClaim
    namespace: str
    name: str
    requests: tuple[TpuRequest, ...]


# ---- reading claims ---------------------------------------------------------------------


def claim_of(obj: Mapping[str, Any], tpu_classes: frozenset[str]) -> Claim | None:
    """A claim object's requests of the TPU DeviceClasses (v1, v1beta2: `requests[].exactly`;
    v1beta1: the request itself); None for another kind or without a name."""
    kind = obj.get("kind")
    if kind not in (CLAIM_TEMPLATE_KIND, CLAIM_KIND):
        return None
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    name, namespace = metadata.get("name"), metadata.get("namespace")
    if not isinstance(name, str) or not name:
        return None
    at = ("spec", "spec") if kind == CLAIM_TEMPLATE_KIND else ("spec",)
    return Claim(
        str(kind),
        namespace if isinstance(namespace, str) else "",
        name,
        tuple(_tpu_requests(obj, at, tpu_classes)),
    )


def _tpu_requests(
    obj: Mapping[str, Any], at: tuple[str, ...], tpu_classes: frozenset[str]
) -> list[TpuRequest]:
    node: Any = obj
    for step in (*at, "devices", "requests"):
        node = node.get(step) if isinstance(node, dict) else None
    found = []
    base = FieldPath.root(*at, "devices", "requests")
    for i, request in enumerate(node[:MAX_POD_TEMPLATES] if isinstance(node, list) else ()):
        if not isinstance(request, dict):
            continue
        exactly = request.get("exactly")
        body, field = (
            (exactly, base.index(i).child("exactly"))
            if isinstance(exactly, dict)
            else (request, base.index(i))
        )
        if body.get("deviceClassName") not in tpu_classes:
            continue
        name = request.get("name")
        found.append(
            TpuRequest(
                name if isinstance(name, str) else "",
                field,
                str(body.get("allocationMode") or EXACT_COUNT),
                body.get("count", 1),
                tuple(_selectors(body.get("selectors"), field.child("selectors"))),
            )
        )
    return found


def _selectors(items: object, at: FieldPath) -> list[Selector]:
    found = []
    for i, item in enumerate(items[:MAX_POD_TEMPLATES] if isinstance(items, list) else ()):
        cel = item.get("cel") if isinstance(item, dict) else None
        expression = cel.get("expression") if isinstance(cel, dict) else None
        if isinstance(expression, str):
            field = at.index(i).child("cel", "expression")
            found.append(Selector(expression, field, _comparisons(expression)))
    return found


_ATTRIBUTE = (
    r'device\.attributes\[\s*"([^"]+)"\s*\](?:\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*"([^"]*)"\s*\])'
)
_VALUE = r'"([^"\\]*)"|\'([^\'\\]*)\'|(-?\d+)'
_COMPARISON = re.compile(rf"^\s*(?:{_ATTRIBUTE})\s*==\s*(?:{_VALUE})\s*$")
_REFERENCE = re.compile(_ATTRIBUTE)
_DRIVER = re.compile(r'^\s*device\.driver\s*==\s*(?:"[^"]*"|\'[^\']*\')\s*$')


def _comparisons(expression: str) -> Mapping[str, object] | None:
    """`device.attributes["D"].a == "v" && ...` as {"D/a": "v", ...}; None for anything else."""
    if len(expression) > MAX_EXPRESSION:
        return None
    found: dict[str, object] = {}
    for clause in expression.split("&&"):
        match = _COMPARISON.match(clause.strip().strip("()"))
        if match is None:
            if _DRIVER.match(clause.strip().strip("()")):
                continue
            return None
        domain, dotted, bracketed, text, quoted, number = match.groups()
        attribute = dotted if dotted is not None else bracketed
        value: object = text if text is not None else quoted if quoted is not None else int(number)
        found[f"{domain}/{attribute}"] = value
    return found


def references(expression: str) -> list[tuple[str, str]]:
    """(domain, attribute) of every attribute an expression names (up to MAX_EXPRESSION)."""
    return [
        (m.group(1), m.group(2) if m.group(2) is not None else m.group(3))
        for m in _REFERENCE.finditer(expression[:MAX_EXPRESSION])
    ]


# ---- a Pod that uses a TPU claim ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimShape:
    """What a Pod's TPU claim says of its node: the accelerator, the slice, the chips."""

    accelerator: str | None
    topology: str | None
    chips: int | None  # chips of the node the claim gets (All), or the count asked


def shape_of(claim: Claim, driver: str, catalog: Catalog) -> ClaimShape | None:
    """The shape a claim's first TPU request pins, from its selectors; None without one."""
    if not claim.requests:
        return None
    request = claim.requests[0]
    wanted = request.wanted()
    accelerator = wanted.get(f"{driver}/accelerator")
    generation = wanted.get(f"{driver}/tpuGen")
    if accelerator is None and isinstance(generation, str):
        accelerator = next(
            (a.name for a in catalog.accelerators.values() if a.dra_generation == generation),
            None,
        )
    topology = wanted.get(f"{driver}/topology")
    chips = wanted.get(f"{driver}/chipCount")
    if request.mode == EXACT_COUNT and isinstance(request.count, int):
        chips = request.count if chips is None else chips
    return ClaimShape(
        accelerator if isinstance(accelerator, str) else None,
        topology if isinstance(topology, str) else None,
        chips if isinstance(chips, int) and not isinstance(chips, bool) else None,
    )


def pod_claims(spec: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(claim name in the Pod, kind, name) of each entry of `spec.resourceClaims`."""
    found = []
    items = spec.get("resourceClaims")
    for item in items[:MAX_POD_TEMPLATES] if isinstance(items, list) else ():
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        template, claim = item.get("resourceClaimTemplateName"), item.get("resourceClaimName")
        if isinstance(template, str) and template:
            found.append((item["name"], CLAIM_TEMPLATE_KIND, template))
        elif isinstance(claim, str) and claim:
            found.append((item["name"], CLAIM_KIND, claim))
    return found


def with_claim(tpu: TpuSpec, used: str, shape: ClaimShape, catalog: Catalog) -> TpuSpec:
    """The spec as a TPU spec of the claim's shape: its TPU type and slice where the Pod sets
    none, and, on the first app container that uses the claim, the chips of the node."""
    accelerator = catalog.accelerator(shape.accelerator) if shape.accelerator else None
    chips = shape.chips
    if chips is None and accelerator is not None and shape.topology is not None:
        runs = accelerator.chips_per_host.get(shape.topology, ())
        chips = runs[0] if len(runs) == 1 else None  # All: every chip of the node
    requests: list[ChipRequest] = list(tpu.chips)
    if not requests:
        for container in tpu.containers[:MAX_CONTAINERS]:
            if not container.init and used in _claims_used(container.body):
                requests.append(ChipRequest(container, "claims", used, chips))
                break
    apps = tuple(r for r in requests if not r.container.init)
    return replace(
        tpu,
        accelerator_value=(
            shape.accelerator if tpu.accelerator_value is None else tpu.accelerator_value
        ),
        topology_value=shape.topology if tpu.topology_value is None else tpu.topology_value,
        chips=tuple(requests),
        tpu_containers=tuple(r.container for r in requests),
        app_chips=apps,
    )


def _claims_used(container: Mapping[str, Any]) -> set[str]:
    resources = container.get("resources")
    claims = resources.get("claims") if isinstance(resources, dict) else None
    return {
        c["name"]
        for c in (claims if isinstance(claims, list) else ())[:MAX_POD_TEMPLATES]
        if isinstance(c, dict) and isinstance(c.get("name"), str)
    }


def check_toleration(tpu: TpuSpec) -> list[Violation]:
    """A Pod that gets TPUs from a claim tolerates the TPU nodes' taint: nothing else adds the
    toleration (no google.com/tpu request for ExtendedResourceToleration to see)."""
    for r in tpu.chips:  # not any() over a generator: this runs for every TPU pod spec
        if r.which == "claims":
            break
    else:
        return []
    if _tolerates(tpu.spec.get("tolerations")):
        return []
    return [
        required(
            "tpu.toleration-missing",
            tpu.at.child("tolerations"),
            f"the Pods get TPUs from a resource claim, and GKE taints TPU nodes "
            f"{TPU_TAINT_KEY}={TPU_TAINT_VALUE}:NoSchedule; without a toleration they never "
            f"schedule: add {{key: {TPU_TAINT_KEY}, operator: Exists, effect: NoSchedule}}",
        )
    ]


def _tolerates(tolerations: object) -> bool:
    for t in tolerations[:MAX_POD_TEMPLATES] if isinstance(tolerations, list) else ():
        if not isinstance(t, dict) or t.get("effect") not in (None, "", "NoSchedule"):
            continue
        key, operator = t.get("key"), t.get("operator") or "Equal"
        if operator == "Exists" and key in (None, "", TPU_TAINT_KEY):
            return True
        if operator == "Equal" and key == TPU_TAINT_KEY and t.get("value") == TPU_TAINT_VALUE:
            return True
    return False


# ---- claims checked where they are written --------------------------------------------------


def check(
    claim: Claim, driver: str, attributes: tuple[str, ...], catalog: Catalog
) -> list[Violation]:
    """A TPU claim the driver cannot allocate: an attribute it does not publish, a value no
    TPU node has, a count that is not a whole node."""
    found: list[Violation] = []
    for request in claim.requests:
        for selector in request.selectors:
            found += _check_names(selector, driver, attributes)
            found += _check_values(selector, driver, catalog)
        found += _check_mode(request, driver, catalog)
    return found


def _check_names(selector: Selector, driver: str, attributes: tuple[str, ...]) -> list[Violation]:
    found = []
    for domain, name in references(selector.expression):
        if domain != driver or name in attributes:
            continue
        meant = min(attributes, key=lambda known: edit_distance(name.lower(), known.lower()))
        close = edit_distance(name.lower(), meant.lower()) <= 2
        hint = f'did you mean "{meant}"?' if close else f"it publishes {', '.join(attributes)}"
        never = "so no device matches and the claim is never allocated"
        found.append(
            _invalid(selector, f'{driver} devices have no attribute "{name}", {never}; {hint}')
        )
    return found


def _check_values(selector: Selector, driver: str, catalog: Catalog) -> list[Violation]:
    wanted = selector.equals or {}
    found = []
    accelerator = wanted.get(f"{driver}/accelerator")
    if isinstance(accelerator, str) and catalog.accelerator(accelerator) is None:
        meant = catalog.near_miss(accelerator) if len(accelerator) <= MAX_LABEL_VALUE else None
        if meant is not None:
            found.append(
                _invalid(selector, f'no TPU node is "{accelerator}"; did you mean "{meant}"?')
            )
        else:
            found.append(
                _invalid(
                    selector,
                    f'"{accelerator[:MAX_LABEL_VALUE]}" is not in this webhook\'s TPU catalog '
                    f"({catalog.names()}); the claim's shape is not checked",
                    advisory=True,
                )
            )
    generation = wanted.get(f"{driver}/tpuGen")
    generations = sorted(
        {a.dra_generation for a in catalog.accelerators.values() if a.dra_generation}
    )
    if isinstance(generation, str) and generation not in generations and generations:
        meant = min(generations, key=lambda g: edit_distance(generation.lower(), g))
        if edit_distance(generation.lower()[:MAX_LABEL_VALUE], meant) <= 2:
            found.append(
                _invalid(selector, f'no TPU chip is tpuGen "{generation}"; did you mean "{meant}"?')
            )
    topology = wanted.get(f"{driver}/topology")
    known = catalog.accelerator(accelerator) if isinstance(accelerator, str) else None
    if known is not None and isinstance(topology, str) and not known.shapes.get(topology):
        none = f"no node of topology {topology[:MAX_LABEL_VALUE]} exists"
        offers = f"{known.name} offers {known.offered()}"
        found.append(_invalid(selector, f"{offers}; {none}, so the claim is never allocated"))
    return found


def _check_mode(request: TpuRequest, driver: str, catalog: Catalog) -> list[Violation]:
    if request.mode == ALL:
        return []
    if request.mode != EXACT_COUNT:
        return []  # the API server refuses other modes itself
    count = request.count
    wanted = request.wanted()
    known = catalog.accelerator(str(wanted.get(f"{driver}/accelerator", "")))
    machines = (
        known.machine_types
        if known
        else [m for a in catalog.accelerators.values() for m in a.machine_types]
    )
    whole = sorted({m.chips for m in machines})
    if isinstance(count, int) and count in whole:
        return []
    ok = " or ".join(map(str, whole))
    return [
        invalid(
            "tpu.claim-invalid",
            request.field.child("count"),
            count,
            f"GKE's TPU DRA driver allocates whole nodes ({ok} chips); set allocationMode: All, "
            f"or count to the chips of the node",
        )
    ]


def _invalid(selector: Selector, detail: str, advisory: bool = False) -> Violation:
    return invalid(
        "tpu.claim-invalid", selector.field, selector.expression, detail, advisory=advisory
    )
