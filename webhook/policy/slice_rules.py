"""Rules on how a workload runs a multi-host slice: host counts, indexing, names, worker env."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from webhook.catalog.tpu import MAX_HOSTNAME_LENGTH, TPU_WORKER_HOSTNAMES, TPU_WORKER_ID, SliceShape
from webhook.policy.paths import FieldPath
from webhook.policy.podspec import Container, TpuSpec
from webhook.policy.violations import ErrorType, Violation
from webhook.policy.workloads import SLICE_OWNERS, Workload, dig


def check_workload_can_form_slice(
    obj: Mapping[str, Any], workload: Workload, tpu: TpuSpec, shape: SliceShape
) -> list[Violation]:
    if workload.hosts is not None or owned_by_slice_controller(obj):
        return []
    what = "a Pod that no Job owns" if workload.kind == "Pod" else f"a {workload.kind}"
    return [
        Violation(
            "tpu.multihost-unsupported-workload",
            tpu.selector.key("cloud.google.com/gke-tpu-topology"),
            ErrorType.FORBIDDEN,
            f"{shape.accelerator} {shape.describe()}, and {what} cannot form a multi-host "
            f"slice; run it as an Indexed Job with parallelism {shape.hosts} (or a StatefulSet or "
            "LeaderWorkerSet), or pick a single-host topology",
        )
    ]


def check_indexed(obj: Mapping[str, Any], workload: Workload, shape: SliceShape) -> list[Violation]:
    hosts = workload.hosts
    if hosts is None or hosts.indexed_mode is None:
        return []
    name, required = hosts.indexed_mode
    value = dig(obj, hosts.paths[name])
    if value == required:
        return []
    field = FieldPath.root(*hosts.paths[name])
    detail = (
        f"{shape.accelerator} {shape.describe()}; set {name}: {required} so each Pod "
        f"knows its {TPU_WORKER_ID}"
    )
    if value is None:
        return [Violation("tpu.multihost-not-indexed", field, ErrorType.REQUIRED, detail)]
    return [Violation("tpu.multihost-not-indexed", field, ErrorType.UNSUPPORTED, detail, value)]


def check_host_counts(
    obj: Mapping[str, Any], workload: Workload, shape: SliceShape
) -> list[Violation]:
    hosts = workload.hosts
    if hosts is None:
        return []
    found = []
    for name in hosts.host_counts:
        value = dig(obj, hosts.paths[name])
        if value == shape.hosts and not isinstance(value, bool):
            continue
        fields = " and ".join(f"{'.'.join(hosts.controller)}.{n}" for n in hosts.host_counts)
        field = FieldPath.root(*hosts.paths[name])
        detail = f"{shape.describe()}; set {fields} to {shape.hosts}"
        if value is None:
            found.append(
                Violation(
                    "tpu.multihost-parallelism",
                    field,
                    ErrorType.REQUIRED,
                    detail + _default_note(hosts.count_defaults.get(name)),
                )
            )
        else:
            found.append(
                Violation("tpu.multihost-parallelism", field, ErrorType.INVALID, detail, value)
            )
    return found


def check_worker_env(tpu: TpuSpec, shape: SliceShape) -> list[Violation]:
    found = []
    for container in tpu.tpu_containers:
        for position, name, value in literal_env(container):
            if name == TPU_WORKER_HOSTNAMES:
                count = len([h for h in str(value).split(",") if h.strip()])
                if count != shape.hosts:
                    found.append(
                        Violation(
                            "tpu.worker-env-conflict",
                            _env_value(container, position),
                            ErrorType.INVALID,
                            f"{TPU_WORKER_HOSTNAMES} lists {count} hosts but {shape.describe()}; "
                            f"list {shape.hosts} hostnames or remove it to let tpu-webhook set it",
                            value,
                        )
                    )
            elif name == TPU_WORKER_ID and not _in_range(value, shape.hosts):
                found.append(
                    Violation(
                        "tpu.worker-env-conflict",
                        _env_value(container, position),
                        ErrorType.INVALID,
                        f"{TPU_WORKER_ID} must be 0..{shape.hosts - 1} for a slice of "
                        f"{shape.hosts} hosts; remove it to let tpu-webhook set it",
                        value,
                    )
                )
    return found


def check_hostname_length(
    obj: Mapping[str, Any], workload: Workload, shape: SliceShape
) -> list[Violation]:
    hosts = workload.hosts
    name = dig(obj, ("metadata", "name"))
    if hosts is None or not hosts.named_by_object or not isinstance(name, str) or not name:
        return []
    last = f"{name}-{shape.hosts - 1}"
    if len(last) <= MAX_HOSTNAME_LENGTH:
        return []
    room = MAX_HOSTNAME_LENGTH - len(last) + len(name)
    return [
        Violation(
            "tpu.hostname-too-long",
            FieldPath.root("metadata", "name"),
            ErrorType.INVALID,
            f"the last host's hostname {json.dumps(last)} is {len(last)} characters and a "
            f"hostname is at most {MAX_HOSTNAME_LENGTH}; shorten the name to at most {room} "
            "characters",
            name,
        )
    ]


def check_retries(obj: Mapping[str, Any], workload: Workload, shape: SliceShape) -> list[Violation]:
    hosts = workload.hosts
    if hosts is None or hosts.retries is None:
        return []
    value = dig(obj, hosts.paths[hosts.retries])
    retries = hosts.retries_default if value is None else value
    if not isinstance(retries, int) or retries <= 0:
        return []
    field = FieldPath.root(*hosts.paths[hosts.retries])
    detail = (
        f"retries restart one Pod at a time, and a restarted host cannot rejoin its slice of "
        f"{shape.hosts}; set {hosts.retries}: 0 and retry the whole Job (or use JobSet)"
    )
    if value is None:
        return [
            Violation(
                "tpu.multihost-retries",
                field,
                ErrorType.REQUIRED,
                f"{detail} (it defaults to {retries})",
                advisory=True,
            )
        ]
    return [
        Violation("tpu.multihost-retries", field, ErrorType.INVALID, detail, value, advisory=True)
    ]


def owned_by_slice_controller(obj: Mapping[str, Any]) -> bool:
    owners = dig(obj, ("metadata", "ownerReferences"))
    if not isinstance(owners, list):
        return False
    return any(
        isinstance(o, dict)
        and (str(o.get("apiVersion", "")).partition("/")[0], o.get("kind")) in SLICE_OWNERS
        for o in owners
    )


def literal_env(container: Container) -> list[tuple[int, str, object]]:
    """(i of env[i], name, value) for every env entry with a literal value."""
    env = container.body.get("env")
    if not isinstance(env, list):
        return []
    return [
        (i, item["name"], item["value"])
        for i, item in enumerate(env)
        if isinstance(item, dict) and isinstance(item.get("name"), str) and "value" in item
    ]


def _env_value(container: Container, position: int) -> FieldPath:
    return container.path.child("env").index(position).child("value")


def _in_range(value: object, hosts: int) -> bool:
    text = str(value)
    return text.isascii() and text.isdigit() and len(text) <= 9 and int(text) < hosts


def _default_note(default: int | None) -> str:
    return "" if default is None else f" (it defaults to {default})"
