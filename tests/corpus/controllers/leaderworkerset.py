"""LeaderWorkerSet (read at LWS, see common.py): its defaulting webhook, the leader StatefulSet its
controller creates and, per leader Pod, the workers' StatefulSet."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tests.corpus.controllers.common import (
    Obj,
    annotations_of,
    asks_for_chips,
    controller_ref,
    labels_of,
    name_of,
    namespace_of,
    stamp,
    stand_in,
)
from tests.corpus.controllers.leaderworkerset_webhook import (
    LWS_EXCLUSIVE,
    LWS_GROUP_INDEX,
    LWS_GROUP_KEY,
    LWS_LEADER_NAME,
    LWS_LEADER_TPUS,
    LWS_NAME,
    LWS_REVISION,
    LWS_SIZE,
    LWS_SUBDOMAIN_POLICY,
    LWS_SUBGROUP_EXCLUSIVE,
    LWS_SUBGROUP_SIZE,
    LWS_SUBGROUP_TYPE,
    LWS_WORKER_INDEX,
    lws_pod_webhook,
)


def default_lws(lws: Obj) -> None:
    """LWS's webhook Default (LWS pkg/webhooks/leaderworkerset_webhook.go) and CRD defaults."""
    spec = lws["spec"]
    spec.setdefault("replicas", 1)
    template = spec.setdefault("leaderWorkerTemplate", {})
    template.setdefault("size", 1)
    template.setdefault("restartPolicy", "RecreateGroupOnPodRestart")
    if template.get("subGroupPolicy") is not None:
        template["subGroupPolicy"].setdefault("subGroupPolicyType", "LeaderWorker")
    rollout = spec.setdefault("rolloutStrategy", {})
    rollout.setdefault("type", "RollingUpdate")
    rollout.setdefault(
        "rollingUpdateConfiguration", {"maxUnavailable": 1, "maxSurge": 0, "partition": 0}
    )
    spec.setdefault("networkConfig", {}).setdefault("subdomainPolicy", "Shared")


def lws_revision(lws: Mapping[str, Any]) -> str:
    """Stand-in for LWS's template revision hash (pkg/utils/revision/revision_utils.go)."""
    return stand_in(f"{namespace_of(lws)}/{name_of(lws)}", 10)


def _lws_group_annotations(lws: Mapping[str, Any]) -> dict[str, str]:
    template = lws["spec"]["leaderWorkerTemplate"]
    found = {LWS_SIZE: str(template["size"])}
    lws_annotations = annotations_of(lws)
    if lws_annotations.get(LWS_EXCLUSIVE):
        found[LWS_EXCLUSIVE] = lws_annotations[LWS_EXCLUSIVE]
    subgroup = template.get("subGroupPolicy")
    if subgroup is not None:
        found[LWS_SUBGROUP_TYPE] = str(subgroup.get("subGroupPolicyType", "LeaderWorker"))
        found[LWS_SUBGROUP_SIZE] = str(subgroup["subGroupSize"])
        if lws_annotations.get(LWS_SUBGROUP_EXCLUSIVE):
            found[LWS_SUBGROUP_EXCLUSIVE] = lws_annotations[LWS_SUBGROUP_EXCLUSIVE]
    return found


def lws_leader_statefulset(lws: Mapping[str, Any]) -> Obj:
    """LWS pkg/controllers/leaderworkerset_controller.go
    constructLeaderStatefulSetApplyConfiguration: StatefulSet `<lws>`, replicas = groups,
    serviceName `<lws>`, the leader template (or the worker template when there is none) with
    worker-index 0 and the group annotations."""
    spec = lws["spec"]
    template_src = spec["leaderWorkerTemplate"].get("leaderTemplate")
    template = copy.deepcopy(template_src or spec["leaderWorkerTemplate"]["workerTemplate"])
    revision = lws_revision(lws)
    group_annotations = _lws_group_annotations(lws)
    if spec["networkConfig"]["subdomainPolicy"] == "UniquePerReplica":
        group_annotations[LWS_SUBDOMAIN_POLICY] = "UniquePerReplica"
    leader_labels = {LWS_WORKER_INDEX: "0", LWS_NAME: name_of(lws), LWS_REVISION: revision}
    stamp(template, leader_labels, group_annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name_of(lws),
            "namespace": namespace_of(lws),
            "labels": {**labels_of(lws), LWS_NAME: name_of(lws), LWS_REVISION: revision},
            "annotations": {
                **annotations_of(lws),
                "leaderworkerset.sigs.k8s.io/replicas": str(spec["replicas"]),
            },
            "ownerReferences": [controller_ref(lws)],
        },
        "spec": {
            "serviceName": name_of(lws),
            "replicas": spec["replicas"],
            "podManagementPolicy": "Parallel",
            "template": template,
            "selector": {"matchLabels": {LWS_NAME: name_of(lws), LWS_WORKER_INDEX: "0"}},
        },
    }


def lws_worker_statefulsets(leader: Mapping[str, Any], lws: Mapping[str, Any]) -> list[Obj]:
    """LWS pkg/controllers/pod_controller.go constructWorkerStatefulSetApplyConfiguration: per
    leader Pod a StatefulSet named like the leader with size - 1 replicas, ordinals from 1, owned
    by the leader Pod. Reads the group labels LWS's Pod webhook gave the leader. With exclusive
    placement the workers get the leader node's value of the topology key (a stand-in here)."""
    leader_labels = labels_of(leader)
    size = int(lws["spec"]["leaderWorkerTemplate"]["size"])
    if leader_labels.get(LWS_WORKER_INDEX) != "0" or size == 1:
        return []
    leader = lws_pod_webhook(leader)  # group-index and group-key come from LWS's Pod webhook
    leader_labels = labels_of(leader)
    template = copy.deepcopy(lws["spec"]["leaderWorkerTemplate"]["workerTemplate"])
    group = {
        LWS_GROUP_INDEX: leader_labels[LWS_GROUP_INDEX],
        LWS_NAME: name_of(lws),
        LWS_GROUP_KEY: leader_labels[LWS_GROUP_KEY],
    }
    worker_annotations = _lws_group_annotations(lws)
    worker_annotations[LWS_LEADER_NAME] = name_of(leader)
    if asks_for_chips(leader["spec"]):
        worker_annotations[LWS_LEADER_TPUS] = "true"
    stamp(template, {**group, LWS_REVISION: lws_revision(lws)}, worker_annotations)
    topology_key = annotations_of(lws).get(LWS_EXCLUSIVE)
    if topology_key:
        selector = template.setdefault("spec", {}).setdefault("nodeSelector", {})
        selector[topology_key] = f"node-of-{name_of(leader)}"
    unique = lws["spec"]["networkConfig"]["subdomainPolicy"] == "UniquePerReplica"
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": name_of(leader),
                "namespace": namespace_of(leader),
                "labels": {**labels_of(lws), **group, LWS_REVISION: lws_revision(lws)},
                "annotations": annotations_of(lws),
                "ownerReferences": [controller_ref(leader)],
            },
            "spec": {
                "serviceName": name_of(leader) if unique else name_of(lws),
                "replicas": size - 1,
                "podManagementPolicy": "Parallel",
                "ordinals": {"start": 1},
                "template": template,
                "selector": {"matchLabels": group},
            },
        }
    ]
