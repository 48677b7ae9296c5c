"""Rules on what a TPU Pod asks of its host besides chips: cpu and memory that fit the VM, and
are quantities at all."""

from __future__ import annotations

from decimal import Decimal

from webhook.catalog.quantity import format_quantity
from webhook.catalog.tpu import SliceShape
from webhook.policy.podspec import Container, TpuSpec
from webhook.policy.quantities import quantity
from webhook.policy.violations import Violation, invalid


def check_node_capacity(tpu: TpuSpec, shape: SliceShape | None) -> list[Violation]:
    machine = shape.machine if shape else None
    if shape is None or machine is None:
        return []
    found = []
    for resource, capacity, text in (
        ("cpu", machine.cpu, machine.cpu_text),
        ("memory", machine.memory, machine.memory_text),
    ):
        if capacity is None:
            continue  # no public figure for this VM
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
            invalid(
                "tpu.resources-exceed-node",
                field,
                value,
                f"a {machine.name} VM ({shape.accelerator}, {shape.chips_per_host} chips) has "
                f"{text} "
                f"{resource}{unsure}; request at most {text} or the Pod never schedules",
                advisory=resource in machine.unconfirmed,
            )
        )
    return found


def check_quantities(tpu: TpuSpec) -> list[Violation]:
    found = []
    for c in tpu.tpu_containers:
        for which, entries in (("requests", c.requests), ("limits", c.limits)):
            for resource, value in entries.items():
                if (resource == "cpu" or resource == "memory") and quantity(value) is None:
                    found.append(
                        invalid(
                            "tpu.quantity-invalid",
                            c.resource_path(which, resource),
                            value,
                            "must be a Kubernetes quantity, such as 10, 500m or 64Gi",
                        )
                    )
    return found
