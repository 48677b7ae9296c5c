"""Rules on one pod spec: selectors, chip counts, requests and limits, VM capacity."""

from __future__ import annotations

import json
from decimal import Decimal

from webhook.catalog.quantity import format_quantity
from webhook.catalog.tpu import ACCELERATOR_LABEL, TOPOLOGY_LABEL, TPU_RESOURCE, Catalog, SliceShape
from webhook.policy.podspec import (
    Container,
    TpuSpec,
    known_accelerator,
    quantity,
    whole_number,
)
from webhook.policy.violations import ErrorType, Violation


def check_accelerator(tpu: TpuSpec, catalog: Catalog) -> list[Violation]:
    value = tpu.accelerator_value
    if isinstance(value, str) and catalog.accelerator(value) is not None:
        return []  # the common case, before any field path or message is built
    field = tpu.selector.key(ACCELERATOR_LABEL)
    if value is None:
        if not tpu.chips:
            return []
        first = tpu.chips[0]
        return [
            Violation(
                "tpu.accelerator-missing",
                field,
                ErrorType.REQUIRED,
                f"{first.container.path} requests {first.value} {TPU_RESOURCE} chips; set the TPU "
                f"type to run them on, one of {catalog.names()}",
            )
        ]
    if not isinstance(value, str):
        return [
            Violation(
                "tpu.accelerator-unknown",
                field,
                ErrorType.INVALID,
                f"must be a string, one of {catalog.names()}",
                value,
            )
        ]
    if catalog.accelerator(value) is not None:
        return []
    meant = catalog.near_miss(value)
    if meant is not None:
        kind = "a machine type, not an accelerator" if catalog.is_machine_type(value) else "unknown"
        return [
            Violation(
                "tpu.accelerator-unknown",
                field,
                ErrorType.UNSUPPORTED,
                f"{kind}; did you mean {json.dumps(meant)}?",
                value,
            )
        ]
    return [
        Violation(
            "tpu.accelerator-unknown",
            field,
            ErrorType.UNSUPPORTED,
            f"not in this webhook's TPU catalog ({catalog.names()}); its topologies and chip "
            "counts are not checked, add it to the catalog (--catalog) if it is a new TPU type",
            value,
            advisory=True,
        )
    ]


def check_topology(tpu: TpuSpec, catalog: Catalog) -> list[Violation]:
    if tpu.accelerator_value is None:
        return []
    accelerator = known_accelerator(tpu, catalog)
    value = tpu.topology_value
    if accelerator is not None and isinstance(value, str) and catalog.shapes(accelerator, value):
        return []  # the common case, before any field path or message is built
    field = tpu.selector.key(TOPOLOGY_LABEL)
    if value is None:
        example = f' (e.g. "{accelerator.example_topology}")' if accelerator else ""
        return [
            Violation(
                "tpu.topology-missing",
                field,
                ErrorType.REQUIRED,
                f"set it when {ACCELERATOR_LABEL} is set{example}",
            )
        ]
    if accelerator is None:
        return []
    if not isinstance(value, str) or not catalog.shapes(accelerator, value):
        return [
            Violation(
                "tpu.topology-invalid",
                field,
                ErrorType.UNSUPPORTED,
                f"{accelerator.name} offers {accelerator.offered()}",
                value,
            )
        ]
    return []


def check_chip_counts(tpu: TpuSpec, catalog: Catalog) -> list[Violation]:
    found = []
    for r in tpu.chips:
        if r.chips is None:
            found.append(
                Violation(
                    "tpu.quantity-invalid",
                    r.field,
                    ErrorType.INVALID,
                    f"{TPU_RESOURCE} is a whole number of chips, such as 4",
                    r.value,
                )
            )
    accelerator = known_accelerator(tpu, catalog)
    topology = tpu.topology_value
    if accelerator is None or not isinstance(topology, str):
        return found
    runs = accelerator.chips_per_host.get(topology)
    if not runs:
        return found  # an unknown topology: its own rule reports it
    wrong = [r for r in tpu.chips if r.chips is not None and r.chips not in runs]
    if not wrong:
        return found
    ok = " or ".join(map(str, runs))
    detail = (
        f"{accelerator.name} {topology} runs {ok} chips per host; set requests and limits to {ok}"
    )
    return found + [
        Violation("tpu.chips-per-host", r.field, ErrorType.INVALID, detail, r.chips) for r in wrong
    ]


def check_requests_equal_limits(tpu: TpuSpec) -> list[Violation]:
    found = []
    for container in tpu.tpu_containers:
        requests, limits = container.resources("requests"), container.resources("limits")
        if TPU_RESOURCE not in requests or TPU_RESOURCE not in limits:
            continue
        asked, limit = requests[TPU_RESOURCE], limits[TPU_RESOURCE]
        if quantity(asked) is not None and quantity(asked) != quantity(limit):
            found.append(
                Violation(
                    "tpu.requests-limits-differ",
                    container.resource_path("limits", TPU_RESOURCE),
                    ErrorType.INVALID,
                    f"must equal requests[{TPU_RESOURCE}] ({asked}); a Pod runs all chips of its "
                    f"host, set both to the same count",
                    _as_number(limit),
                )
            )
    return found


def check_single_tpu_container(tpu: TpuSpec, catalog: Catalog) -> list[Violation]:
    accelerator = known_accelerator(tpu, catalog)
    apps = [r for r in tpu.chips if not r.container.init]
    if accelerator is None or accelerator.multiple_tpu_containers or len(apps) < 2:
        return []
    first = apps[0]
    return [
        Violation(
            "tpu.multiple-tpu-containers",
            r.field,
            ErrorType.FORBIDDEN,
            f"only one container may request {TPU_RESOURCE} on {accelerator.name} "
            f"({first.container.path} requests {first.value}); move the chips to one container",
        )
        for r in apps[1:]
    ]


def check_node_capacity(tpu: TpuSpec, shape: SliceShape | None) -> list[Violation]:
    machine = shape.machine if shape else None
    if shape is None or machine is None:
        return []
    found = []
    for resource, capacity, text in (
        ("cpu", machine.cpu, machine.cpu_text),
        ("memory", machine.memory, machine.memory_text),
    ):
        # the request, or the limit Kubernetes will default it from
        asking: list[tuple[Container, str, object]] = []
        total = Decimal(0)
        for c in tpu.containers:
            if c.init:
                continue
            which = "requests" if resource in c.requests else "limits"
            if resource in c.resources(which):
                value = c.resources(which)[resource]
                asking.append((c, which, value))
                total += quantity(value) or 0
        if total <= capacity:
            continue
        field = (
            asking[0][0].resource_path(asking[0][1], resource)
            if len(asking) == 1
            else tpu.at.child("containers")
        )
        value = asking[0][2] if len(asking) == 1 else format_quantity(total)
        unsure = " (an unconfirmed figure)" if resource in machine.unconfirmed else ""
        found.append(
            Violation(
                "tpu.resources-exceed-node",
                field,
                ErrorType.INVALID,
                f"a {machine.name} VM ({shape.accelerator}, {shape.chips_per_host} chips) has "
                f"{text} "
                f"{resource}{unsure}; request at most {text} or the Pod never schedules",
                value,
                advisory=resource in machine.unconfirmed,
            )
        )
    return found


def check_quantities(tpu: TpuSpec) -> list[Violation]:
    found = []
    for c in tpu.tpu_containers:
        for which in ("requests", "limits"):
            for resource, value in c.resources(which).items():
                if (resource == "cpu" or resource == "memory") and quantity(value) is None:
                    found.append(
                        Violation(
                            "tpu.quantity-invalid",
                            c.resource_path(which, resource),
                            ErrorType.INVALID,
                            "must be a Kubernetes quantity, such as 10, 500m or 64Gi",
                            value,
                        )
                    )
    return found


def _as_number(value: object) -> object:
    """A whole quantity prints as a number (`3`, as users wrote it), anything else as sent."""
    number = whole_number(value)
    return value if number is None else number
