"""What the controller models share: the sources they were read from, reading and writing plain-dict
objects, stable stand-ins for generated names and UIDs, and the TPU fields they look at.

Docstrings cite a source as `<NAME> <path>`, NAME one of the versions below."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]

K8S = "kubernetes/kubernetes@v1.35.4"  # the control plane `tests/tools` builds
JOBSET = "kubernetes-sigs/jobset@08dfbdfd682714a9ab929633eca8dc95315187e7"
LWS = "kubernetes-sigs/lws@060ab4da17eea1f0865fcbd3236bb1075e2cea32"
KUBERAY = "ray-project/kuberay@feeaf72facab4881ba2b179248bb67315634e229"
KUBERAY_TPU = "ai-on-gke/kuberay-tpu-webhook@ef658db45757e88abc584b0d17fbab930b45316f"
KUEUE = "kubernetes-sigs/kueue@ff69552e79ad21652c36caa97038382e55625cf7"
TRAINER = "kubeflow/trainer@658725bdae5c7e3a0854d93ac6ff492e109a22ab"  # v2.3.0
PATHWAYS = "google/pathways-job@c0cc7594c9d03a1d96a89110008a0f2d3c9ef189"  # v0.1.4

TPU = "google.com/tpu"
ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY = "cloud.google.com/gke-tpu-topology"


def uid_of(obj: Mapping[str, Any]) -> str:
    """A stable stand-in for the UID the API server gives `obj`."""
    meta = obj.get("metadata") or {}
    key = f"{obj.get('kind')}/{meta.get('namespace', 'default')}/{meta.get('name')}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, key))


def stand_in(text: str, length: int = 5) -> str:
    """A stable stand-in for a random suffix (utilrand.String) or a short hash."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery utilrand's alphabet
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:length])


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()  # the hash LWS and JobSet use


def group_kind(obj: Mapping[str, Any]) -> tuple[str, str]:
    return str(obj.get("apiVersion", "")).rpartition("/")[0], str(obj.get("kind", ""))


def meta(obj: Obj) -> Obj:
    found: Obj = obj.setdefault("metadata", {})
    return found


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "default")


def stamp(template: Obj, labels: Mapping[str, str], annotations: Mapping[str, str]) -> None:
    """Add `labels` and `annotations` to a template's own, replacing values of the same key."""
    tmeta = meta(template)
    tmeta["labels"] = {**(tmeta.get("labels") or {}), **labels}
    tmeta["annotations"] = {**(tmeta.get("annotations") or {}), **annotations}


def controller_ref(owner: Mapping[str, Any]) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def containers(spec: Mapping[str, Any], *lists: str) -> list[Obj]:
    found: list[Obj] = []
    for key in lists or ("containers", "initContainers"):
        found += [c for c in spec.get(key) or [] if isinstance(c, dict)]
    return found


def listed(obj: Obj, key: str) -> list[Any]:
    """obj[key] as a list to append to; a key written with no value (`env:`) reads as null."""
    if obj.get(key) is None:
        obj[key] = []
    value: list[Any] = obj[key]
    return value


def tpu_chips(container: Mapping[str, Any]) -> int:
    """The chips a container asks for (limits first, as LWS's numTPUsRequested reads them)."""
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        value = (resources.get(section) or {}).get(TPU)
        if value not in (None, 0, "0"):
            return int(value)
    return 0


def asks_for_chips(spec: Mapping[str, Any]) -> bool:
    """Whether any container or init container of a Pod spec asks for chips."""
    return any(tpu_chips(c) for c in containers(spec))


def env_value(container: Mapping[str, Any], name: str) -> str | None:
    for item in container.get("env") or []:
        if item.get("name") == name:
            return str(item.get("value") or "")
    return None
