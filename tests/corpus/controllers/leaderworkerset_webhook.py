"""LeaderWorkerSet's Pod webhook (read at LWS, see common.py): the group and subgroup labels,
exclusive placement, and the TPU and LWS_* variables it writes into the Pods of a LeaderWorkerSet,
leaders and workers."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from tests.corpus.controllers.common import (
    Obj,
    annotations_of,
    containers,
    env_value,
    labels_of,
    listed,
    meta,
    name_of,
    namespace_of,
    sha1,
    tpu_chips,
)

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_REVISION = "leaderworkerset.sigs.k8s.io/template-revision-hash"
LWS_LEADER_NAME = "leaderworkerset.sigs.k8s.io/leader-name"
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_SUBGROUP_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
LWS_SUBGROUP_SIZE = "leaderworkerset.sigs.k8s.io/subgroup-size"
LWS_SUBGROUP_TYPE = "leaderworkerset.sigs.k8s.io/subgroup-policy-type"
LWS_SUBGROUP_INDEX = "leaderworkerset.sigs.k8s.io/subgroup-index"
LWS_SUBGROUP_KEY = "leaderworkerset.sigs.k8s.io/subgroup-key"
LWS_SUBDOMAIN_POLICY = "leaderworkerset.sigs.k8s.io/subdomainPolicy"
LWS_LEADER_TPUS = "leaderworkerset.sigs.k8s.io/leader-requests-tpus"


def lws_pod_webhook(pod: Mapping[str, Any]) -> Obj:
    """LWS's Pod webhook Default (LWS pkg/webhooks/pod_webhook.go): group and subgroup labels,
    exclusive-placement affinity, the TPU variables of pkg/utils/accelerators/tpu.go (nothing when
    TPU_WORKER_ID or TPU_WORKER_HOSTNAMES is already in the first TPU container) and the LWS_*
    variables of pkg/utils/pod/pod_utils.go. Pods without the LWS name label are returned as is."""
    out = copy.deepcopy(dict(pod))
    pod_labels = meta(out).setdefault("labels", {})
    if LWS_NAME not in pod_labels:
        return out
    pod_annotations = annotations_of(out)
    size = int(pod_annotations[LWS_SIZE])
    subgroup_size = pod_annotations.get(LWS_SUBGROUP_SIZE)
    if pod_labels.get(LWS_WORKER_INDEX) == "0":
        pod_labels.setdefault(LWS_GROUP_INDEX, str(parent_and_ordinal(name_of(out))[1]))
        if pod_annotations.get(LWS_SUBDOMAIN_POLICY) == "UniquePerReplica":
            out["spec"]["subdomain"] = name_of(out)
        key = pod_labels.setdefault(LWS_GROUP_KEY, sha1(f"{namespace_of(out)}/{name_of(out)}"))
        if LWS_EXCLUSIVE in pod_annotations:
            _exclusive_affinity(out, key, pod_annotations[LWS_EXCLUSIVE], LWS_GROUP_KEY)
        if (
            subgroup_size
            and not pod_labels.get(LWS_SUBGROUP_INDEX)
            and pod_annotations.get(LWS_SUBGROUP_TYPE) != "LeaderExcluded"
        ):
            pod_labels[LWS_SUBGROUP_INDEX] = "0"
            pod_labels[LWS_SUBGROUP_KEY] = sha1(f"{name_of(out)}/0")
    else:
        worker_index = parent_and_ordinal(name_of(out))[1]
        pod_labels[LWS_WORKER_INDEX] = str(worker_index)
        if subgroup_size and not pod_labels.get(LWS_SUBGROUP_INDEX):
            per = int(subgroup_size)
            leader_extra = (size - 1) % per == 0 and size % per != 0
            index = str((worker_index - 1) // per if leader_extra else worker_index // per)
            pod_labels[LWS_SUBGROUP_INDEX] = index
            leader_name = pod_annotations.get(LWS_LEADER_NAME, "")
            pod_labels[LWS_SUBGROUP_KEY] = sha1(f"{leader_name}/{index}")
    tpu = _tpu_containers(out)
    if tpu and all(env_value(tpu[0], n) is None for n in ("TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID")):
        if subgroup_size:
            _lws_tpu_env_subgroup(out, tpu[0])
        else:
            _lws_tpu_env(out, tpu, size)
    _lws_env(out)
    return out


def _exclusive_affinity(pod: Obj, key_value: str, topology_key: str, label_key: str) -> None:
    affinity = pod["spec"].setdefault("affinity", {})
    affinity.setdefault("podAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", []
    ).append(
        {
            "labelSelector": {
                "matchExpressions": [{"key": label_key, "operator": "In", "values": [key_value]}]
            },
            "topologyKey": topology_key,
        }
    )
    affinity.setdefault("podAntiAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", []
    ).append(
        {
            "labelSelector": {
                "matchExpressions": [
                    {"key": label_key, "operator": "Exists"},
                    {"key": label_key, "operator": "NotIn", "values": [key_value]},
                ]
            },
            "topologyKey": topology_key,
        }
    )


def _tpu_containers(pod: Mapping[str, Any]) -> list[Obj]:
    """getContainersRequestingTPUs: containers first, then init containers."""
    return [c for c in containers(pod["spec"], "containers", "initContainers") if tpu_chips(c)]


def _lws_tpu_env(pod: Obj, tpu: list[Obj], size: int) -> None:
    """AddTPUVariables: hostnames leader first (when it holds chips), one entry per TPU container;
    TPU_WORKER_ID = pod index x containers + i; TPU_PROCESS_PORT 8476 + i."""
    pod_labels, pod_annotations = labels_of(pod), annotations_of(pod)
    subdomain = pod["spec"].get("subdomain", "")
    leader_requests = pod_annotations.get(LWS_LEADER_TPUS) == "true"
    if pod_labels.get(LWS_WORKER_INDEX) == "0":
        leader, index = name_of(pod), 0
    else:
        leader, index = parent_and_ordinal(name_of(pod))
        if not leader_requests:
            index -= 1
    ports = [env_value(c, "TPU_PROCESS_PORT") or str(8476 + i) for i, c in enumerate(tpu)]
    hosts: list[str] = []
    if leader_requests or pod_labels.get(LWS_WORKER_INDEX) == "0":
        hosts += [f"{leader}.{subdomain}"] * len(tpu)
    for i in range(1, size):
        hosts += [f"{leader}-{i}.{subdomain}"] * len(tpu)
    addresses = [f"{h}:{ports[n % len(tpu)]}" for n, h in enumerate(hosts)]
    for i, container in enumerate(tpu):
        _add_tpu_worker_env(container, hosts, index * len(tpu) + i, leader, addresses, ports[i])


def _lws_tpu_env_subgroup(pod: Obj, container: Obj) -> None:
    """addTPUVariablesSubGroup: one slice per subgroup, only the first TPU container."""
    pod_labels, pod_annotations = labels_of(pod), annotations_of(pod)
    per = int(pod_annotations[LWS_SUBGROUP_SIZE])
    subgroup = int(pod_labels[LWS_SUBGROUP_INDEX])
    worker = int(pod_labels[LWS_WORKER_INDEX])
    leader_requests = pod_annotations.get(LWS_LEADER_TPUS) == "true"
    worker_id = worker % per
    if worker != 0 and not leader_requests:
        worker_id, subgroup = (worker - 1) % per, (worker - 1) // per
    port = env_value(container, "TPU_PROCESS_PORT") or "8476"
    subdomain = pod["spec"].get("subdomain", "")
    start, end = per * subgroup + 1, per * (subgroup + 1)
    hosts: list[str] = []
    leader = name_of(pod)
    if worker == 0:
        hosts.append(f"{leader}.{subdomain}")
        end -= 1
    else:
        leader = parent_and_ordinal(name_of(pod))[0]
        if leader_requests and subgroup == 0:
            end -= 1
            hosts.append(f"{leader}.{subdomain}")
        elif leader_requests:
            start, end = start - 1, end - 1
    hosts += [f"{leader}-{i}.{subdomain}" for i in range(start, end + 1)]
    addresses = [f"{h}:{port}" for h in hosts]
    _add_tpu_worker_env(container, hosts, worker_id, leader, addresses, port)


def _add_tpu_worker_env(
    container: Obj, hosts: list[str], worker_id: int, name: str, addresses: list[str], port: str
) -> None:
    """What AddTPUVariables and addTPUVariablesSubGroup both write into a TPU container: the
    hostnames, the worker id, the slice's name (the leader's), the process addresses, and
    TPU_PROCESS_PORT unless the container sets it."""
    had_port = env_value(container, "TPU_PROCESS_PORT") is not None
    env = listed(container, "env")
    env += [
        {"name": "TPU_WORKER_HOSTNAMES", "value": ",".join(hosts)},
        {"name": "TPU_WORKER_ID", "value": str(worker_id)},
        {"name": "TPU_NAME", "value": name},
        {"name": "TPU_PROCESS_ADDRESSES", "value": ",".join(addresses)},
    ]
    if not had_port:
        env.append({"name": "TPU_PROCESS_PORT", "value": port})


def _lws_env(pod: Obj) -> None:
    """AddLWSVariables: LWS_LEADER_ADDRESS, LWS_GROUP_SIZE, LWS_WORKER_INDEX first in every
    container, replacing entries of the same name."""
    pod_labels = labels_of(pod)
    first = [
        {
            "name": "LWS_LEADER_ADDRESS",
            "value": f"{pod_labels[LWS_NAME]}-{pod_labels[LWS_GROUP_INDEX]}."
            f"{pod['spec'].get('subdomain', '')}.{namespace_of(pod)}",
        },
        {"name": "LWS_GROUP_SIZE", "value": annotations_of(pod)[LWS_SIZE]},
        {"name": "LWS_WORKER_INDEX", "value": pod_labels[LWS_WORKER_INDEX]},
    ]
    names = {item["name"] for item in first}
    for container in containers(pod["spec"]):
        rest = [item for item in container.get("env") or [] if item.get("name") not in names]
        container["env"] = copy.deepcopy(first) + rest


def parent_and_ordinal(name: str) -> tuple[str, int]:
    """GetParentNameAndOrdinal (LWS pkg/utils/statefulset/statefulset_utils.go)."""
    match = re.fullmatch(r"(.*)-([0-9]+)", name)
    return (match.group(1), int(match.group(2))) if match else ("", -1)
