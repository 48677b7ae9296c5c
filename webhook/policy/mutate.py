"""Targeted JSON Patch operations that fill in what a TPU workload is missing.

Only ever `add` where a value is absent: a present value (the user's or GKE's) is never touched,
and mutating the patched object again yields no operation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

from webhook.catalog.tpu import (
    JOB_COMPLETION_INDEX,
    JOB_NAME_LABEL,
    LEGACY_JOB_NAME_LABEL,
    MAX_HOSTNAME_LENGTH,
    MAX_PORT_NAME_LENGTH,
    TPU_WORKER_HOSTNAMES,
    TPU_WORKER_ID,
    Port,
    SliceShape,
)
from webhook.policy.bounds import MAX_ENV, MAX_PORTS
from webhook.policy.context import Owner
from webhook.policy.podspec import Container, TpuSpec
from webhook.policy.quantities import quantity
from webhook.policy.templates import EnvVar, Site, dig
from webhook.policy.violations import ErrorType, Violation

PatchOp = dict[str, Any]
NAME_PATH = ("metadata", "name")


def copy_missing_limits(tpu: TpuSpec, resources: Iterable[str]) -> list[PatchOp]:
    """requests -> limits (and limits -> requests) for the TPU containers, where one is missing."""
    names = tuple(resources)
    ops: list[PatchOp] = []
    for container in tpu.tpu_containers:
        requests, limits = container.requests, container.limits
        to_limits: dict[str, Any] = {}
        to_requests: dict[str, Any] = {}
        for name in names:
            if name in requests:
                if name not in limits and _copyable(requests[name]):
                    to_limits[name] = requests[name]
            elif name in limits and _copyable(limits[name]):
                to_requests[name] = limits[name]
        if to_limits:
            ops += _add_entries(container, "limits", to_limits)
        if to_requests:
            ops += _add_entries(container, "requests", to_requests)
    return ops


def add_missing_ports(tpu: TpuSpec, ports: Iterable[Port]) -> list[PatchOp]:
    """The catalog's TPU ports, once per Pod, on its first TPU app container: a number no
    container of the Pod declares yet. Under hostNetwork nothing is added: the API server makes
    each containerPort a hostPort there, which would reserve the node's port for this Pod alone
    (and it rejects a Pod that declares one number twice)."""
    if tpu.host_network:
        return []
    target = None
    for container in tpu.tpu_containers:
        if not container.init:
            target = container
            break
    if target is None:
        return []
    if tpu.unread_containers:
        return []  # which numbers are taken is not read: nothing is added
    declared = 0
    numbers: set[object] = set()
    for c in tpu.containers:
        listed = c.body.get("ports")
        if isinstance(listed, list) and listed:
            declared += len(listed)
            if declared > MAX_PORTS:
                return []  # likewise
            numbers |= _values(listed, "containerPort")
    missing = []
    names: set[object] | None = None  # every port name of the Pod, read when a port is missing
    counters: dict[str, int] = {}
    for port in ports:
        if port.container_port in numbers:
            continue
        if names is None:
            names = set()
            for c in tpu.containers:
                names |= _values(c.body.get("ports"), "name")
        name = _unique(port.name, names, counters)
        names.add(name)
        missing.append({"name": name, "containerPort": port.container_port, "protocol": "TCP"})
    if not missing:
        return []
    return _append(target.pointer("ports"), target.body.get("ports"), missing)


def add_missing_env(tpu: TpuSpec, env: list[EnvVar]) -> list[PatchOp]:
    """`env` entries on each TPU app container whose names are not set there yet."""
    ops: list[PatchOp] = []
    for container in tpu.tpu_containers:
        if container.init:
            continue
        present = container.body.get("env")
        if isinstance(present, list) and len(present) > MAX_ENV:
            continue  # an unread entry of the same name would win over ours
        names = _values(present, "name")
        missing = []
        for item in env:
            if item["name"] not in names:
                missing.append(item)
        if missing:
            ops += _append(container.pointer("env"), present, missing)
    return ops


def worker_env(
    obj: Mapping[str, Any], site: Site, tpu: TpuSpec, shape: SliceShape, owner: Owner | None
) -> tuple[list[EnvVar], list[PatchOp], list[Violation]]:
    """TPU_WORKER_ID / TPU_WORKER_HOSTNAMES of a multi-host workload, and a defaulted subdomain,
    where tpu-webhook knows how the workload numbers its hosts. Never where the owner's own
    machinery writes them (LeaderWorkerSet, KubeRay): LeaderWorkerSet writes none of its
    variables once either one is present."""
    hosts = site.template.hosts
    if hosts is None:
        return [], [], []  # a Pod: its owner's entry says (Workload.child_pod_env)
    if not hosts.injects or (owner is not None and not hosts.whole_slice_when_owned):
        return [], [], []  # e.g. a LeaderWorkerSet's StatefulSet: only part of a slice
    if hosts.indexed_mode is not None:
        mode, required = hosts.indexed_mode
        if dig(obj, site.resolve(hosts.paths[mode])) != required:
            return [], [], []
    env: list[EnvVar] = [
        {"name": TPU_WORKER_ID, "valueFrom": {"fieldRef": {"fieldPath": hosts.index_field_ref}}}
    ]
    name = dig(obj, NAME_PATH) if hosts.named_by_object else None
    if not isinstance(name, str) or not name:
        return env, [], []
    ops: list[PatchOp] = []
    warnings: list[Violation] = []
    if hosts.service is not None:
        service = dig(obj, site.resolve(hosts.service))
    elif tpu.spec.get("subdomain") is not None:
        service = tpu.spec["subdomain"]  # the user's, even empty or of a wrong type
    else:
        service, ops, warnings = _subdomain(tpu, name, shape)
    if _listable(service, name, shape.hosts):
        env.append({"name": TPU_WORKER_HOSTNAMES, "value": hostnames(name, service, shape.hosts)})
    return env, ops, warnings


def _listable(service: object, name: str, hosts: int) -> TypeGuard[str]:
    """Whether the hostnames can be listed: each `<name>-<i>` a hostname (a DNS label, at most
    63 characters: a longer one is refused at the owner, tpu.hostname-too-long) and the Service
    one too; a comma, the list's separator, is in no valid name (the API server rejects the
    object after the mutation): a list with one is never written."""
    return (
        isinstance(service, str)
        and 0 < len(service) <= MAX_HOSTNAME_LENGTH
        and len(name) + 1 + len(str(hosts - 1)) <= MAX_HOSTNAME_LENGTH
        and "," not in name
        and "," not in service
    )


def hostnames(name: str, service: str, hosts: int) -> str:
    names = []
    for i in range(hosts):
        names.append(f"{name}-{i}.{service}")
    return ",".join(names)


def job_pod_worker_env(
    obj: Mapping[str, Any], tpu: TpuSpec, shape: SliceShape
) -> tuple[list[EnvVar], list[PatchOp], list[Violation]]:
    """A Pod of an Indexed Job that still lacks the variables (generateName, an older Job, a
    Job whose TPU node labels arrived when Kueue admitted it)."""
    annotations = dig(obj, ("metadata", "annotations"))
    labels = dig(obj, ("metadata", "labels"))
    index = annotations.get(JOB_COMPLETION_INDEX) if isinstance(annotations, dict) else None
    job = None
    if isinstance(labels, dict):
        job = labels.get(JOB_NAME_LABEL) or labels.get(LEGACY_JOB_NAME_LABEL)
    if (
        not isinstance(index, str)
        or not _small_number(index)
        or not isinstance(job, str)
        or not job
    ):
        return [], [], []
    if int(index) >= shape.hosts:
        return [], [], []  # a Pod beyond the slice: nothing consistent to give it
    service, ops, warnings = _subdomain(tpu, job, shape)
    env: list[EnvVar] = [{"name": TPU_WORKER_ID, "value": index}]
    if _listable(service, job, shape.hosts):
        env.append({"name": TPU_WORKER_HOSTNAMES, "value": hostnames(job, service, shape.hosts)})
    return env, ops, warnings


def _subdomain(
    tpu: TpuSpec, name: str, shape: SliceShape
) -> tuple[object, list[PatchOp], list[Violation]]:
    present = tpu.spec.get("subdomain")
    if present is not None:  # the user's, even empty or of a wrong type
        return present, [], []
    if len(name) > MAX_HOSTNAME_LENGTH:
        return None, [], []  # no DNS label: the name is refused (tpu.hostname-too-long)
    field = tpu.at.child("subdomain")
    warning = Violation(
        "tpu.subdomain-defaulted",
        field,
        ErrorType.DEFAULTED,
        f"set to the Job name so the {shape.hosts} hosts resolve as {name}-0.{name} .. "
        f"{name}-{shape.hosts - 1}.{name}; create a headless Service named {json.dumps(name)} "
        "(clusterIP: None) selecting the Job's Pods",
        name,
        advisory=True,
    )
    return name, [{"op": "add", "path": tpu.pointer + "/subdomain", "value": name}], [warning]


def _add_entries(container: Container, which: str, entries: dict[str, Any]) -> list[PatchOp]:
    if not entries:
        return []
    resources = container.body.get("resources")
    if resources is None:
        path = container.pointer("resources")
        return [{"op": "add", "path": path, "value": {which: entries}}]
    section = resources.get(which) if isinstance(resources, dict) else False
    if section is None:
        path = container.pointer("resources", which)
        return [{"op": "add", "path": path, "value": entries}]
    if not isinstance(section, dict):
        return []  # a value of the wrong type is the user's: reported, never replaced
    return [
        {"op": "add", "path": container.pointer("resources", which, name), "value": value}
        for name, value in entries.items()
    ]


def _append(pointer: str, present: object, items: list[Any]) -> list[PatchOp]:
    if not items or (present is not None and not isinstance(present, list)):
        return []  # a value of the wrong type is the user's: reported, never replaced
    if present is None:
        return [{"op": "add", "path": pointer, "value": items}]
    return [{"op": "add", "path": pointer + "/-", "value": item} for item in items]


def _unique(name: str, taken: set[object], counters: dict[str, int]) -> str:
    """`name`, else `name-2`, `name-3`...: each call resumes where the last one stopped."""
    candidate, n = name, counters.get(name, 2)
    while candidate in taken:
        suffix = f"-{n}"
        candidate, n = name[: MAX_PORT_NAME_LENGTH - len(suffix)] + suffix, n + 1
    counters[name] = n
    return candidate


def _copyable(value: object) -> bool:
    """A valid quantity as Kubernetes serialises it; an invalid one is reported, not copied."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        return False
    amount = quantity(value)
    return amount is not None and amount.is_finite()


def _small_number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 9


def _values(items: object, key: str) -> set[object]:
    """`item[key]` of each mapping in a list (`ports`, `env`), where it is a scalar: a list
    where a name belongs is the API server's to reject. A loop: see podspec.read_tpu_spec."""
    found: set[object] = set()
    for item in items if isinstance(items, list) else ():
        value = item.get(key) if isinstance(item, dict) else None
        if isinstance(value, str | int | float):
            found.add(value)
    return found
