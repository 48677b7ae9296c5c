"""Who a person wrote: the top of a controller-made object's chain of controlling owners.

A Pod of a Job of a JobSet of a TrainJob names its Job in its ownerReferences (controller: true);
the Job names its JobSet, and so on. `top_owner` follows those references up, one read each, and
stops at an object with no controlling owner (the one a person wrote), at one it cannot read (a
kind it does not know, one the API server does not serve, 403, 404), or after `MAX_DEPTH` steps.
Pure: the read is a function given to it (serving/ownerevents.py reads with the API); the cache
of answers is bounded and forgets them after a while (an owner may be orphaned or adopted).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from webhook.policy.bounds import MAX_OWNER_REFERENCES
from webhook.policy.workloads import OWNER_KINDS, WORKLOADS

# Steps up the chain at most: Pod -> StatefulSet -> Pod -> StatefulSet -> LeaderWorkerSet is 4
# (a LeaderWorkerSet's worker), Pod -> Job -> JobSet -> TrainJob is 3.
MAX_DEPTH = 6
# Chains remembered (by the uid of the reviewed object's controller), and for how long.
CACHE_SIZE = 4096
CACHE_SECONDS = 600.0

# (group, kind) -> resource, for every kind whose controller makes the workloads tpu-webhook
# decides (policy/workloads.py OWNER_KINDS: its table's kinds and a Deployment's ReplicaSets),
# but the DRA claims, which own nothing: the kinds the walk reads (and the chart's RBAC lets it
# `get`: templates/owner-events.yaml).
OWNER_RESOURCES: dict[tuple[str, str], str] = {
    **{key: w.resource for key, w in WORKLOADS.items() if key in OWNER_KINDS and not w.claim},
    ("apps", "ReplicaSet"): "replicasets",
}


class ObjectRef(NamedTuple):
    """An object as an Event's involvedObject names it."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def describe(self) -> str:
        """`LeaderWorkerSet default/lws`."""
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else self.kind


# What reads an owner: its object, or None when it cannot be read (unknown kind, not served,
# 403, 404); any other failure raises (the walk is not cached then).
Lookup = Callable[[ObjectRef], Mapping[str, Any] | None]


def controller_ref(metadata: object, namespace: str) -> ObjectRef | None:
    """The controlling owner named in `metadata.ownerReferences`, in the object's namespace (a
    namespaced object's owners are in its namespace), or None."""
    owners = metadata.get("ownerReferences") if isinstance(metadata, dict) else None
    if not isinstance(owners, list):
        return None
    for ref in owners[:MAX_OWNER_REFERENCES]:
        if isinstance(ref, dict) and ref.get("controller") is True:
            fields = [ref.get(key) for key in ("apiVersion", "kind", "name", "uid")]
            if not all(isinstance(value, str) and value for value in fields):
                return None
            api_version, kind, name, uid = fields
            return ObjectRef(str(api_version), str(kind), str(name), namespace, str(uid))
    return None


def object_path(ref: ObjectRef) -> str | None:
    """The API path that reads `ref` (`/apis/batch/v1/namespaces/ns/jobs/name`), or None for a
    kind the walk does not read."""
    resource = OWNER_RESOURCES.get((ref.group, ref.kind))
    if resource is None or not ref.namespace or "/" in ref.name or ref.name in (".", ".."):
        return None
    base = f"/apis/{ref.api_version}" if ref.group else f"/api/{ref.api_version}"
    return f"{base}/namespaces/{ref.namespace}/{resource}/{ref.name}"


def top_owner(first: ObjectRef, lookup: Lookup, max_depth: int = MAX_DEPTH) -> ObjectRef:
    """The top of the chain that starts at `first` (a controller-made object's controller)."""
    current = first
    seen = {first.uid}
    for _ in range(max_depth):
        obj = lookup(current)
        metadata = obj.get("metadata") if obj is not None else None
        if not isinstance(metadata, dict) or metadata.get("uid") != current.uid:
            return current  # not readable, or another object of that name since
        above = controller_ref(metadata, current.namespace)
        if above is None or above.uid in seen:
            return current
        seen.add(above.uid)
        current = above
    return current


class OwnerCache:
    """uid of a controller -> the top of its chain, at most `size` of them, each for `seconds`;
    the least recently used goes first."""

    def __init__(
        self,
        size: int = CACHE_SIZE,
        seconds: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = size
        self.seconds = seconds
        self.clock = clock
        self._tops: OrderedDict[str, tuple[float, ObjectRef]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tops)

    def top(self, first: ObjectRef, lookup: Lookup) -> ObjectRef:
        """The cached top of `first`'s chain, or the walk's (then cached)."""
        now = self.clock()
        held = self._tops.get(first.uid)
        if held is not None and now - held[0] < self.seconds:
            self._tops.move_to_end(first.uid)
            return held[1]
        found = top_owner(first, lookup)
        self._tops[first.uid] = (now, found)
        self._tops.move_to_end(first.uid)
        while len(self._tops) > self.size:
            self._tops.popitem(last=False)
        return found
