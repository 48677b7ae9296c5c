"""Rules on how a workload runs a multi-host slice: host counts, indexing, names, worker env.

They belong to the object a user writes. A controller's child (a Job's Pods, a LeaderWorkerSet's
StatefulSets, a RayCluster's Pods) is decided for what holds for any pod spec only: how its slice
is formed was decided at its owner, with the owner's own numbering.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from webhook.catalog.owners import PATHWAYS_RESOURCE_MANAGER_FLAG
from webhook.catalog.tpu import (
    HOST_NETWORK_DNS_POLICY,
    KUEUE_SLICE_SIZE,
    MAX_HOSTNAME_LENGTH,
    TOPOLOGY_LABEL,
    TPU_WORKER_HOSTNAMES,
    TPU_WORKER_ID,
    SliceShape,
)
from webhook.policy.bounds import MAX_ARGS, MAX_ENV
from webhook.policy.paths import FieldPath
from webhook.policy.podspec import Container, TpuSpec
from webhook.policy.templates import Site, dig
from webhook.policy.violations import Violation, forbidden, invalid, required, shown, unsupported


def check_workload_can_form_slice(
    kind: str, site: Site, tpu: TpuSpec, shape: SliceShape
) -> list[Violation]:
    if site.template.hosts is not None or _names_its_hosts(tpu):
        return []
    what = "a Pod that no controller owns" if kind == "Pod" else f"a {kind}"
    field = tpu.slice_field if tpu.slice_value is not None else tpu.label_field(TOPOLOGY_LABEL)
    return [
        forbidden(
            "tpu.multihost-unsupported-workload",
            field,
            f"{shape.accelerator} {shape.describe()}, and {what} cannot form a multi-host "
            f"slice (its Pods have no {TPU_WORKER_ID}); run it as an Indexed Job with "
            f"parallelism {shape.hosts}, a JobSet, a LeaderWorkerSet or a RayCluster, or pick a "
            "single-host topology",
        )
    ]


def check_indexed(obj: Mapping[str, Any], site: Site, shape: SliceShape) -> list[Violation]:
    hosts = site.template.hosts
    if hosts is None or hosts.indexed_mode is None:
        return []
    name, wanted = hosts.indexed_mode
    path = site.resolve(hosts.paths[name])
    value = dig(obj, path)
    if value == wanted or (value is None and hosts.indexed_default == wanted):
        return []
    field = FieldPath.of(path)
    detail = (
        f"{shape.accelerator} {shape.describe()}; set {name}: {wanted} so each Pod "
        f"knows its {TPU_WORKER_ID}"
    )
    if value is None:
        return [required("tpu.multihost-not-indexed", field, detail)]
    return [unsupported("tpu.multihost-not-indexed", field, value, detail)]


def check_host_counts(obj: Mapping[str, Any], site: Site, shape: SliceShape) -> list[Violation]:
    hosts = site.template.hosts
    if hosts is None:
        return []
    found = []
    for name in hosts.host_counts:
        path = site.resolve(hosts.paths[name])
        value = dig(obj, path)
        counted = hosts.count_defaults.get(name) if value is None else value
        if counted == shape.hosts and not isinstance(counted, bool):
            continue
        # named from the root (spec.parallelism); inside a list item, as the item names them
        controller = () if site.indices else hosts.controller
        fields = " and ".join(".".join((*controller, n)) for n in hosts.host_counts)
        field = FieldPath.of(path)
        detail = f"{shape.describe()}; set {fields} to {shape.hosts}"
        if value is None:
            found.append(
                required(
                    "tpu.multihost-parallelism",
                    field,
                    detail + _default_note(hosts.count_defaults.get(name)),
                )
            )
        else:
            found.append(invalid("tpu.multihost-parallelism", field, value, detail))
    return found


def check_worker_env(tpu: TpuSpec, shape: SliceShape, advisory: bool = False) -> list[Violation]:
    """A user-set TPU_WORKER_HOSTNAMES lists every host (or, with several TPU containers per
    host, every TPU container, as LeaderWorkerSet does); a TPU_WORKER_ID is in range. Of
    several entries of one name the last is the container's (as the kubelet reads them)."""
    found = []
    containers = max(1, len(tpu.app_chips))
    counts = sorted({shape.hosts, shape.hosts * containers})
    for container in tpu.tpu_containers:
        last = {name: (position, value) for position, name, value in literal_env(container)}
        if TPU_WORKER_HOSTNAMES in last:
            position, value = last[TPU_WORKER_HOSTNAMES]
            count = _listed(str(value), counts[-1])
            if count not in counts:
                listed = " or ".join(map(str, counts))
                found.append(
                    invalid(
                        "tpu.worker-env-conflict",
                        env_value_field(container, position),
                        value,
                        f"{TPU_WORKER_HOSTNAMES} lists {count} hosts but {shape.describe()}; "
                        f"list {listed} hostnames or remove it to let tpu-webhook set it",
                        advisory=advisory,
                    )
                )
        if TPU_WORKER_ID in last:
            position, value = last[TPU_WORKER_ID]
            if not _in_range(value, counts[-1]):
                found.append(
                    invalid(
                        "tpu.worker-env-conflict",
                        env_value_field(container, position),
                        value,
                        f"{TPU_WORKER_ID} must be 0..{counts[-1] - 1} for a slice of "
                        f"{shape.hosts} hosts; remove it to let tpu-webhook set it",
                        advisory=advisory,
                    )
                )
    return found


def _listed(value: str, most: int) -> int:
    """The hostnames a comma-separated list names (empty entries aside); past `most` + 1 entries
    only the commas are counted (the list is too long either way)."""
    parts = value.split(",", most + 1)
    if len(parts) <= most + 1:
        return len([h for h in parts if h.strip()])
    return value.count(",") + 1


def check_hostname_length(obj: Mapping[str, Any], site: Site, shape: SliceShape) -> list[Violation]:
    hosts = site.template.hosts
    name = dig(obj, ("metadata", "name"))
    if hosts is None or not hosts.named_by_object or not isinstance(name, str) or not name:
        return []
    return hostname_too_long(name, f"{name}-{shape.hosts - 1}", "host")


def hostname_too_long(name: str, last: str, what: str = "host") -> list[Violation]:
    """`metadata.name` when the last Pod's hostname `last`, made from it, is no DNS label."""
    if len(last) <= MAX_HOSTNAME_LENGTH:
        return []
    room = MAX_HOSTNAME_LENGTH - len(last) + len(name)
    return [
        invalid(
            "tpu.hostname-too-long",
            FieldPath.root("metadata", "name"),
            name,
            f"the last {what}'s hostname {json.dumps(shown(last))} is {len(last)} characters and a "
            f"hostname is at most {MAX_HOSTNAME_LENGTH}; shorten the name to at most {room} "
            "characters",
        )
    ]


def check_retries(
    obj: Mapping[str, Any], site: Site, tpu: TpuSpec, shape: SliceShape
) -> list[Violation]:
    hosts = site.template.hosts
    if hosts is None or hosts.retries is None or pathways_worker(tpu):
        return []
    path = site.resolve(hosts.paths[hosts.retries])
    value = dig(obj, path)
    retries = hosts.retries_default if value is None else value
    if not isinstance(retries, int) or retries <= 0:
        return []
    field = FieldPath.of(path)
    detail = (
        f"retries restart one Pod at a time, and a restarted host cannot rejoin its slice of "
        f"{shape.hosts}; set {hosts.retries}: 0 and {hosts.retry_advice}"
    )
    if value is None:
        return [
            required(
                "tpu.multihost-retries",
                field,
                f"{detail} (it defaults to {retries})",
                advisory=True,
            )
        ]
    return [invalid("tpu.multihost-retries", field, value, detail, advisory=True)]


def pathways_worker(tpu: TpuSpec) -> bool:
    """A Pathways worker: a TPU container started with its resource manager's address (a
    restarted worker rejoins through it, so retries are on purpose: 4 x hosts in pathways-job)."""
    for container in tpu.tpu_containers:
        for name in ("args", "command"):
            words = container.body.get(name)
            for word in words[:MAX_ARGS] if isinstance(words, list) else ():
                if isinstance(word, str) and word.startswith(PATHWAYS_RESOURCE_MANAGER_FLAG):
                    return True
    return False


def check_kueue_slices(
    obj: Mapping[str, Any], site: Site, tpu: TpuSpec, shape: SliceShape
) -> list[Violation]:
    """Kueue Topology-Aware Scheduling slices of a TPU slice's Pods: Kueue admits a workload
    whose Pod count is not a multiple of the slice size and leaves the rest gated forever
    (kubernetes-sigs/kueue#15277); a Kueue slice that is not one TPU slice splits the hosts
    that must meet."""
    written = tpu.annotations.get(KUEUE_SLICE_SIZE)
    hosts = site.template.hosts
    if written is None or hosts is None or not hosts.host_counts:
        return []
    size = (
        int(written)
        if isinstance(written, str) and written.isdigit() and len(written) < 10
        else None
    )
    if size is None or size < 1:
        return []  # Kueue refuses it itself ("must be a number")
    count_path = site.resolve(hosts.paths[hosts.host_counts[0]])
    count = dig(obj, count_path)
    count = hosts.count_defaults.get(hosts.host_counts[0]) if count is None else count
    field = tpu.meta_at.child("annotations").key(KUEUE_SLICE_SIZE)
    found = []
    if isinstance(count, int) and not isinstance(count, bool) and count % size:
        found.append(
            invalid(
                "tpu.kueue-slices",
                field,
                written,
                f"{count} Pods ({FieldPath.of(count_path)}) are not a multiple of {size}: Kueue "
                f"admits the workload and leaves {count % size} Pods gated forever; make them a "
                f"multiple of {size}",
                advisory=True,
            )
        )
    if size != shape.hosts:
        found.append(
            invalid(
                "tpu.kueue-slices",
                field,
                written,
                f"each Kueue slice of {size} Pods should be one TPU slice: {shape.describe()}; "
                f"set it to {shape.hosts}",
                advisory=True,
            )
        )
    return found


def check_host_network_dns(tpu: TpuSpec, shape: SliceShape) -> list[Violation]:
    """With hostNetwork the Pod uses the node's resolver unless told otherwise: the other
    hosts' cluster hostnames (TPU_WORKER_HOSTNAMES) then do not resolve."""
    if not tpu.host_network or tpu.spec.get("dnsPolicy") == HOST_NETWORK_DNS_POLICY:
        return []
    value = tpu.spec.get("dnsPolicy")
    detail = (
        f"with hostNetwork: true the {shape.hosts} hosts' cluster hostnames "
        f"({TPU_WORKER_HOSTNAMES}) resolve only with dnsPolicy: {HOST_NETWORK_DNS_POLICY}"
    )
    field = tpu.at.child("dnsPolicy")
    if value is None:
        return [required("tpu.host-network-dns", field, detail, advisory=True)]
    return [invalid("tpu.host-network-dns", field, value, detail, advisory=True)]


def literal_env(container: Container) -> list[tuple[int, str, object]]:
    """(i of env[i], name, value) for every env entry with a literal value, up to MAX_ENV."""
    env = container.body.get("env")
    if not isinstance(env, list):
        return []
    return [
        (i, item["name"], item["value"])
        for i, item in enumerate(env[:MAX_ENV])
        if isinstance(item, dict) and isinstance(item.get("name"), str) and "value" in item
    ]


def _names_its_hosts(tpu: TpuSpec) -> bool:
    """The user wired the slice by hand: TPU_WORKER_HOSTNAMES is set on a TPU container."""
    for container in tpu.tpu_containers:
        for _, name, _ in literal_env(container):
            if name == TPU_WORKER_HOSTNAMES:
                return True
    return False


def env_value_field(container: Container, position: int) -> FieldPath:
    return container.path.child("env").index(position).child("value")


def _in_range(value: object, hosts: int) -> bool:
    text = str(value)
    return text.isascii() and text.isdigit() and len(text) <= 9 and int(text) < hosts


def _default_note(default: int | None) -> str:
    return "" if default is None else f" (it defaults to {default})"
