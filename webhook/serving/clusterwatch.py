"""The cluster watcher: the objects decisions read from the cluster (GKE ComputeClasses, DRA
DeviceClasses and ResourceClaimTemplates, Kubeflow Trainer runtimes), listed read-only every
`sync_seconds` and handed to the policy as one new view (policy/cluster.py).

Nothing on the request path waits for the API: a review reads the view it finds. A kind whose
API the cluster does not serve (404: no such CRD) is not read, and the policy says so where it
matters ("not known here"); a kind that fails otherwise keeps what was last read. Only `list`
is asked (RBAC: get, list, watch on these resources; the chart's `clusterObjects`).

For the TPU shapes the cluster offers (policy/offered.py) it also reads the TPU Nodes (their
labels only: metadata, selected by the accelerator label, each kept as its three labels, so a
thousand Nodes cost kilobytes), Kueue ResourceFlavors and xpk's resources ConfigMap (one object,
by name), each as the administrator's OfferPolicy allows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from webhook.admission.dispatch import Cluster
from webhook.catalog.tpu import ACCELERATOR_LABEL, TOPOLOGY_LABEL, Catalog
from webhook.certificates.kubeapi import ApiError, KubeApi
from webhook.policy.cluster import ClusterView, view_for
from webhook.policy.offered import NODE_POOL_LABEL, OfferPolicy

log = logging.getLogger("tpu_webhook.cluster")

# kind -> its list path, for every object kind the cluster view is built from
SOURCES: dict[str, str] = {
    "ComputeClass": "/apis/cloud.google.com/v1/computeclasses",
    "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses",
    "ResourceClaimTemplate": "/apis/resource.k8s.io/v1/resourceclaimtemplates",
    "ClusterTrainingRuntime": "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes",
    "TrainingRuntime": "/apis/trainer.kubeflow.org/v1alpha1/trainingruntimes",
    "Node": "/api/v1/nodes",
    "ResourceFlavor": "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
}
# kind -> the list path read where the cluster does not serve SOURCES' (404): an older version
# (Kueue before v1beta2 serves v1beta1 only; newer ones serve it deprecated).
OLDER = {"ResourceFlavor": "/apis/kueue.x-k8s.io/v1beta1/resourceflavors"}
# Kinds read only for the shapes offered, each as the OfferPolicy allows.
OFFER_KINDS = {"Node": "nodes", "ResourceFlavor": "resource_flavors"}
NODE_LABELS = (ACCELERATOR_LABEL, TOPOLOGY_LABEL, NODE_POOL_LABEL)
# Served on GKE Autopilot only (its allowlists API, 1.32.1-gke.1729000+): discovery, no RBAC.
AUTOPILOT_GROUP = "/apis/auto.gke.io"


@dataclass
class ClusterWatch:
    api: KubeApi
    cluster: Cluster  # what the policy reads: its view is replaced whole
    catalog: Catalog
    sync_seconds: float = 30.0
    kinds: Iterable[str] = tuple(SOURCES)
    # last read: kind -> its objects (None: its API is not served)
    held: dict[str, list[dict[str, Any]] | None] = field(default_factory=dict)
    synced_at: float | None = None  # monotonic time of the last pass that read every kind
    errors: dict[str, str] = field(default_factory=dict)
    autopilot: bool = False  # the cluster serves Autopilot's API (last known)
    xpk_configmap: str = ""  # "namespace/name" of xpk's resources ConfigMap; "": not read

    def __post_init__(self) -> None:
        policy = self.offer
        self.kinds = [
            k for k in self.kinds if k not in OFFER_KINDS or getattr(policy, OFFER_KINDS[k])
        ]

    @property
    def offer(self) -> OfferPolicy:
        """The administrator's say on offered shapes: kept from the view it replaces."""
        return self.cluster.view.offered.policy

    async def run(self) -> None:
        """A pass every sync_seconds, the first at once; a failing pass is logged."""
        while True:
            try:
                self.cluster.view = await asyncio.to_thread(self.sync)
            except Exception:
                log.exception("cluster: the pass failed")
            await asyncio.sleep(self.sync_seconds)

    def sync(self) -> ClusterView:
        """List every kind; the view of what is held."""
        for kind in self.kinds:
            try:
                self.held[kind] = self._list(kind)
                self.errors.pop(kind, None)
            except ApiError as error:
                if error.status == 404:
                    self.held[kind] = None  # the cluster does not serve it
                    self.errors.pop(kind, None)
                else:
                    if self.errors.get(kind) != str(error):
                        log.warning("cluster: listing %s failed: %s", kind, error)
                    self.errors[kind] = str(error)
        self.autopilot = self._serves(AUTOPILOT_GROUP, self.autopilot)
        if not self.errors:
            self.synced_at = time.monotonic()
        read = [kind for kind, objects in self.held.items() if objects is not None]
        objects = [obj for found in self.held.values() for obj in found or ()]
        objects += self._xpk()
        view = view_for(self.catalog, objects, read, self.offer)
        return replace(view, autopilot=self.autopilot)

    def _list(self, kind: str) -> list[dict[str, Any]]:
        if kind in OLDER:
            try:
                return self.api.list_all(SOURCES[kind])
            except ApiError as error:
                if error.status != 404:
                    raise
                return self.api.list_all(OLDER[kind])
        if kind != "Node":
            return self.api.list_all(SOURCES[kind])
        nodes = self.api.list_all(
            SOURCES[kind], label_selector=ACCELERATOR_LABEL, metadata_only=True, cached=True
        )
        return [_slim_node(node) for node in nodes]

    def _xpk(self) -> list[dict[str, Any]]:
        """xpk's resources ConfigMap, when named and there ([] otherwise; an error is logged)."""
        if not self.xpk_configmap or not self.offer.xpk:
            return []
        namespace, _, name = self.xpk_configmap.partition("/")
        try:
            found = self.api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        except ApiError as error:
            if error.status != 404 and self.errors.get("ConfigMap") != str(error):
                log.warning("cluster: reading ConfigMap %s failed: %s", self.xpk_configmap, error)
                self.errors["ConfigMap"] = str(error)
            return []
        self.errors.pop("ConfigMap", None)
        return [found]

    def _serves(self, path: str, known: bool) -> bool:
        """Whether the API server serves an API group (discovery); `known` on an error."""
        try:
            self.api.get(path)
        except ApiError as error:
            return False if error.status == 404 else known
        return True

    def counts(self) -> dict[str, int]:
        """Objects held per kind (for /metrics)."""
        return {kind: len(found or ()) for kind, found in self.held.items()}


def _slim_node(node: dict[str, Any]) -> dict[str, Any]:
    """A Node as the offered shapes read it: its name and TPU labels, nothing else held."""
    metadata = node.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    labels = metadata.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    kept = {label: labels[label] for label in NODE_LABELS if label in labels}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": metadata.get("name"), "labels": kept},
    }
