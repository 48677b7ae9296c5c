"""The top of a controller-made object's owners: the walk up controlling ownerReferences, over a
small fake world of stored objects read by their API path (as the recorder reads them)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import pytest

from webhook.policy.workloads import OWNER_KINDS, WORKLOADS
from webhook.serving.ownerchain import (
    MAX_DEPTH,
    OWNER_RESOURCES,
    ObjectRef,
    OwnerCache,
    controller_ref,
    object_path,
    top_owner,
)

NS = "team-a"
API_VERSIONS = {
    "Pod": "v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
    "StatefulSet": "apps/v1",
    "ReplicaSet": "apps/v1",
    "Deployment": "apps/v1",
    "JobSet": "jobset.x-k8s.io/v1alpha2",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
    "TrainJob": "trainer.kubeflow.org/v1alpha1",
    "RayCluster": "ray.io/v1",
    "RayJob": "ray.io/v1",
    "InferenceService": "serving.kserve.io/v1beta1",
}


def ref(kind: str, name: str, uid: str | None = None) -> ObjectRef:
    return ObjectRef(API_VERSIONS[kind], kind, name, NS, uid or f"uid-{kind.lower()}-{name}")


def stored(item: ObjectRef, owner: ObjectRef | None = None, *others: ObjectRef) -> dict[str, Any]:
    """The object `item` as the API server returns it, `owner` its controller, `others` owners
    that are not."""
    refs: list[dict[str, Any]] = [
        {"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid} for o in others
    ]
    if owner is not None:
        refs.append(
            {
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        )
    metadata: dict[str, Any] = {"name": item.name, "namespace": NS, "uid": item.uid}
    if refs:
        metadata["ownerReferences"] = refs
    return {"apiVersion": item.api_version, "kind": item.kind, "metadata": metadata}


class World:
    """Objects by API path; `reads` lists the paths read."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.reads: list[str] = []
        for obj in objects:
            meta = obj["metadata"]
            item = ObjectRef(obj["apiVersion"], obj["kind"], meta["name"], NS, meta["uid"])
            path = object_path(item)
            assert path is not None, item
            self.objects[path] = obj

    def lookup(self, item: ObjectRef) -> Mapping[str, Any] | None:
        path = object_path(item)
        if path is None:
            return None  # a kind the walk does not read
        self.reads.append(path)
        return self.objects.get(path)  # None: 404 (or 403)


POD, JOB, JOBSET, TRAINJOB = (
    ref("Pod", "train-0"),
    ref("Job", "train-w-0"),
    ref("JobSet", "train"),
    ref("TrainJob", "train"),
)
LWS = ref("LeaderWorkerSet", "lws")
LEADERS, LEADER, WORKERS = (
    ref("StatefulSet", "lws"),
    ref("Pod", "lws-0"),
    ref("StatefulSet", "lws-0"),
)
KSERVE = ref("InferenceService", "llm")
DEPLOYMENT, REPLICASET = ref("Deployment", "llm"), ref("ReplicaSet", "llm-5d8f")

CHAINS = {
    "a Job's Pod: the Job, which nobody owns": (
        JOB,
        [stored(JOB)],
        JOB,
        1,
    ),
    "a Job of a JobSet of a TrainJob: the TrainJob": (
        JOB,
        [stored(JOB, JOBSET), stored(JOBSET, TRAINJOB), stored(TRAINJOB)],
        TRAINJOB,
        3,
    ),
    "an LWS worker (Pod -> StatefulSet -> leader Pod -> StatefulSet): the LeaderWorkerSet": (
        WORKERS,
        [stored(WORKERS, LEADER), stored(LEADER, LEADERS), stored(LEADERS, LWS), stored(LWS)],
        LWS,
        4,
    ),
    "an owner that is not the controller is not followed": (
        JOB,
        [stored(JOB, None, JOBSET), stored(JOBSET)],
        JOB,
        1,
    ),
    "an owner it may not read (403) or that is gone (404): the last one it knows": (
        JOB,
        [stored(JOB, JOBSET)],
        JOBSET,
        2,
    ),
    "a kind the walk does not read (a custom owner): that owner, never read": (
        DEPLOYMENT,
        [stored(DEPLOYMENT, KSERVE)],
        KSERVE,
        1,
    ),
    "an object of that name made since (another uid): the owner as named": (
        JOB,
        [stored(ref("Job", "train-w-0", uid="uid-new"), JOBSET), stored(JOBSET)],
        JOB,
        1,
    ),
    "a loop of owners (never in a real cluster): where it closes": (
        REPLICASET,
        [stored(REPLICASET, DEPLOYMENT), stored(DEPLOYMENT, REPLICASET)],
        DEPLOYMENT,
        2,
    ),
}


@pytest.mark.parametrize(
    ("first", "objects", "top", "reads"), list(CHAINS.values()), ids=list(CHAINS)
)
def test_the_walk_ends_at_the_object_a_person_wrote(
    first: ObjectRef, objects: list[dict[str, Any]], top: ObjectRef, reads: int
) -> None:
    world = World(*objects)
    assert top_owner(first, world.lookup) == top
    assert len(world.reads) == reads


def test_the_walk_stops_after_its_maximum_depth() -> None:
    jobs = [ref("Job", f"j{i}") for i in range(MAX_DEPTH + 3)]
    world = World(*[stored(job, above) for job, above in itertools.pairwise(jobs)])
    assert top_owner(jobs[0], world.lookup) == jobs[MAX_DEPTH]
    assert len(world.reads) == MAX_DEPTH


def test_the_controller_is_the_reference_marked_controller() -> None:
    metadata = stored(POD, JOB, JOBSET)["metadata"]
    assert controller_ref(metadata, NS) == JOB
    assert controller_ref(stored(POD, None, JOB)["metadata"], NS) is None
    assert controller_ref({"ownerReferences": "not a list"}, NS) is None
    unnamed = {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "controller": True}]}
    assert controller_ref(unnamed, NS) is None


PATHS = {
    "core": (POD, f"/api/v1/namespaces/{NS}/pods/train-0"),
    "batch": (JOB, f"/apis/batch/v1/namespaces/{NS}/jobs/train-w-0"),
    "custom": (JOBSET, f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/train"),
    "ReplicaSet": (REPLICASET, f"/apis/apps/v1/namespaces/{NS}/replicasets/llm-5d8f"),
    "unknown kind": (KSERVE, None),
    "a name that is a path": (ref("Job", "../secrets/x"), None),
    "no namespace": (JOB._replace(namespace=""), None),
}


@pytest.mark.parametrize(("item", "path"), list(PATHS.values()), ids=list(PATHS))
def test_an_owner_is_read_at_its_api_path(item: ObjectRef, path: str | None) -> None:
    assert object_path(item) == path


def test_the_walk_reads_every_kind_that_makes_workloads_but_the_claims() -> None:
    claims = {key for key, w in WORKLOADS.items() if w.claim}
    assert set(OWNER_RESOURCES) == OWNER_KINDS - claims
    assert OWNER_RESOURCES[("leaderworkerset.x-k8s.io", "LeaderWorkerSet")] == "leaderworkersets"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_cache_walks_a_chain_once_until_it_expires() -> None:
    world = World(stored(JOB, JOBSET), stored(JOBSET))
    clock = Clock()
    cache = OwnerCache(size=8, seconds=60, clock=clock)
    assert cache.top(JOB, world.lookup) == JOBSET
    assert cache.top(JOB, world.lookup) == JOBSET
    assert len(world.reads) == 2
    clock.now += 60
    assert cache.top(JOB, world.lookup) == JOBSET
    assert len(world.reads) == 4


def test_the_cache_forgets_the_least_recently_used_chain_beyond_its_size() -> None:
    jobs = [ref("Job", f"j{i}") for i in range(3)]
    world = World(*[stored(job) for job in jobs])
    cache = OwnerCache(size=2, seconds=60, clock=Clock())
    for job in (jobs[0], jobs[1], jobs[0], jobs[2]):  # j1 is the least recently used
        cache.top(job, world.lookup)
    assert len(cache) == 2
    reads = len(world.reads)
    cache.top(jobs[0], world.lookup)
    assert len(world.reads) == reads
    cache.top(jobs[1], world.lookup)
    assert len(world.reads) == reads + 1


def test_a_failing_read_is_not_cached() -> None:
    def failing(_: ObjectRef) -> Mapping[str, Any] | None:
        raise RuntimeError("500: etcd timed out")

    cache = OwnerCache(size=2, seconds=60, clock=Clock())
    with pytest.raises(RuntimeError):
        cache.top(JOB, failing)
    assert len(cache) == 0
