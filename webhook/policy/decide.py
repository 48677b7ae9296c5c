"""The two decisions the webhook makes about an object: what to add, and what is wrong."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from webhook.catalog.tpu import TPU_RESOURCE, Catalog
from webhook.policy import slice_rules, spec_rules
from webhook.policy.mutate import (
    PatchOp,
    add_missing_env,
    add_missing_ports,
    copy_missing_limits,
    worker_env,
)
from webhook.policy.podspec import TpuSpec, read_tpu_spec, slice_shape
from webhook.policy.violations import Violation
from webhook.policy.workloads import Workload


@dataclass(frozen=True, slots=True)
class Options:
    # Resources whose missing limit (or request) is copied from the other on TPU containers.
    copy_resources: tuple[str, ...] = (TPU_RESOURCE, "cpu", "memory")


class Verdict(
    NamedTuple
):  # one per review: a NamedTuple is built in half a frozen dataclass's time
    denials: tuple[Violation, ...] = ()
    warnings: tuple[Violation, ...] = ()
    patch: tuple[PatchOp, ...] = ()

    @property
    def codes(self) -> list[str]:
        if not self.denials and not self.warnings:
            return []
        return sorted({v.code for v in (*self.denials, *self.warnings)})


ALLOW = Verdict()


def tpu_view(obj: Mapping[str, Any], workload: Workload) -> TpuSpec | None:
    """The TPU view of the object's pod spec; None for anything that is not a TPU workload."""
    return read_tpu_spec(workload.spec_of(obj), workload.spec_path, workload.spec_pointer)


def mutate(
    obj: Mapping[str, Any], workload: Workload, catalog: Catalog, options: Options
) -> Verdict:
    tpu = tpu_view(obj, workload)
    if tpu is None:
        return ALLOW
    ops = copy_missing_limits(tpu, options.copy_resources)
    ops += add_missing_ports(tpu, catalog.ports)
    warnings: list[Violation] = []
    shape = slice_shape(tpu, catalog)
    if shape is not None and shape.multi_host:
        env, extra_ops, warnings = worker_env(obj, workload, tpu, shape)
        ops += extra_ops + add_missing_env(tpu, env)
    return Verdict(warnings=tuple(warnings), patch=tuple(ops))


def validate(
    obj: Mapping[str, Any],
    workload: Workload,
    catalog: Catalog,
    old: Mapping[str, Any] | None = None,
) -> Verdict:
    """Every violation; on UPDATE (`old` given) only those the update introduces deny."""
    tpu = tpu_view(obj, workload)
    if tpu is None:
        return ALLOW
    found = violations(obj, workload, catalog, tpu)
    if old is not None:
        old_tpu = tpu_view(old, workload)
        before = (
            set()
            if old_tpu is None
            else {(v.code, str(v.field)) for v in violations(old, workload, catalog, old_tpu)}
        )
        found = [v for v in found if v.advisory or (v.code, str(v.field)) not in before]
    if not found:
        return ALLOW
    denials: list[Violation] = []
    warnings: list[Violation] = []
    for v in found:
        (warnings if v.advisory else denials).append(v)
    return Verdict(denials=tuple(denials), warnings=tuple(warnings))


def violations(
    obj: Mapping[str, Any], workload: Workload, catalog: Catalog, tpu: TpuSpec
) -> list[Violation]:
    found = [
        *spec_rules.check_accelerator(tpu, catalog),
        *spec_rules.check_topology(tpu, catalog),
        *spec_rules.check_chip_counts(tpu, catalog),
        *spec_rules.check_requests_equal_limits(tpu),
        *spec_rules.check_single_tpu_container(tpu, catalog),
        *spec_rules.check_quantities(tpu),
    ]
    shape = slice_shape(tpu, catalog)
    if shape is None:
        return found
    found += spec_rules.check_node_capacity(tpu, shape)
    if shape.multi_host:
        found += [
            *slice_rules.check_workload_can_form_slice(obj, workload, tpu, shape),
            *slice_rules.check_indexed(obj, workload, shape),
            *slice_rules.check_host_counts(obj, workload, shape),
            *slice_rules.check_worker_env(tpu, shape),
            *slice_rules.check_hostname_length(obj, workload, shape),
            *slice_rules.check_retries(obj, workload, shape),
        ]
    return found
