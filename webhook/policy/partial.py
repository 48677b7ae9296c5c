"""What tpu-webhook did not read of an object (beyond a bound of policy/bounds.py), said as a
warning: an object is never refused for being large, and never passed off as checked in full."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.policy.bounds import MAX_CONTAINERS, MAX_ENV, MAX_POD_TEMPLATES
from webhook.policy.paths import FieldPath
from webhook.policy.podspec import CONTAINER_LISTS, TpuSpec
from webhook.policy.templates import dig
from webhook.policy.violations import ErrorType, Violation
from webhook.policy.workloads import Workload


def check_pod_spec_read(tpu: TpuSpec) -> list[Violation]:
    """Containers beyond MAX_CONTAINERS, env lists beyond MAX_ENV."""
    found: list[Violation] = []
    if tpu.unread_containers:
        total = 0
        for list_name in CONTAINER_LISTS:
            items = tpu.spec.get(list_name)
            total += len(items) if isinstance(items, list) else 0
        found.append(
            _unread(
                tpu.at.child("containers"),
                total,
                f"tpu-webhook reads the first {MAX_CONTAINERS} containers and init containers of a "
                f"pod spec; the other {tpu.unread_containers} were neither checked nor patched",
            )
        )
    for container in tpu.tpu_containers:
        env = container.body.get("env")
        if isinstance(env, list) and len(env) > MAX_ENV:
            found.append(
                _unread(
                    container.path.child("env"),
                    len(env),
                    f"tpu-webhook reads the first {MAX_ENV} env entries of a container; its "
                    "worker variables beyond them were not checked, and none were added",
                )
            )
    return found


def check_templates_read(obj: Mapping[str, Any], workload: Workload) -> list[Violation]:
    """Lists of pod templates (replicatedJobs, workerGroupSpecs) beyond MAX_POD_TEMPLATES."""
    found: list[Violation] = []
    for template in workload.templates:
        if not template.in_list:
            continue
        items = dig(obj, template.list_path)
        if isinstance(items, list) and len(items) > MAX_POD_TEMPLATES:
            found.append(
                _unread(
                    FieldPath.of(template.list_path),
                    len(items),
                    f"tpu-webhook reads the first {MAX_POD_TEMPLATES} items; the other "
                    f"{len(items) - MAX_POD_TEMPLATES} were neither checked nor patched",
                )
            )
    return found


def _unread(field: FieldPath, count: int, detail: str) -> Violation:
    return Violation("tpu.checked-partly", field, ErrorType.TOO_MANY, detail, count, advisory=True)
