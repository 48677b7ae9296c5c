"""What an object says about how it is run, read once per TPU object: its controlling owner,
whether Kueue queues it or it is suspended, and whether it opted out of the webhook."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.catalog.tpu import OPT_OUT_LABEL, QUEUE_NAME_LABEL, SKIP_CHECK_ANNOTATION


@dataclass(frozen=True, slots=True)
class Owner:
    group: str
    kind: str
    name: str


class Context:
    """Read once per TPU object (a plain class: a frozen dataclass pays a setattr per field)."""

    __slots__ = ("opted_out", "owner", "queue", "skip_checks", "suspended")

    def __init__(self, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        labels = _mapping(metadata.get("labels"))
        annotations = _mapping(metadata.get("annotations"))
        queue = labels.get(QUEUE_NAME_LABEL) or annotations.get(QUEUE_NAME_LABEL)
        spec = obj.get("spec")
        # the controlling owner (ownerReferences, controller: true)
        self.owner: Owner | None = controlling_owner(metadata)
        # the Kueue queue it waits in
        self.queue: str | None = queue if isinstance(queue, str) and queue else None
        # spec.suspend, or a Pod held by scheduling gates
        self.suspended = isinstance(spec, dict) and (
            spec.get("suspend") is True or bool(spec.get("schedulingGates"))
        )
        # tpu-webhook.io/ignore: "true": neither checked nor patched
        self.opted_out = labels.get(OPT_OUT_LABEL) == "true"
        # cloud.google.com/skip-tpu-webhook-check: "true": not checked
        self.skip_checks = annotations.get(SKIP_CHECK_ANNOTATION) == "true"

    @property
    def deferred(self) -> str | None:
        """Why TPU node labels may still be missing: they arrive when the workload is admitted."""
        if self.queue is not None:
            return (
                f"it waits in Kueue queue {self.queue}, which adds its ResourceFlavor's node "
                "labels when it admits it"
            )
        if self.suspended:
            return "it is suspended, and its node labels may be set before it is resumed (Kueue)"
        return None


def read_context(obj: Mapping[str, Any]) -> Context:
    return Context(obj)


def controlling_owner(metadata: Mapping[str, Any]) -> Owner | None:
    owners = metadata.get("ownerReferences")
    if owners is None:
        return None
    for o in owners if isinstance(owners, list) else ():
        if isinstance(o, dict) and o.get("controller") is True:
            group = str(o.get("apiVersion", "")).rpartition("/")[0]
            return Owner(group, str(o.get("kind", "")), str(o.get("name", "")))
    return None


def opted_out(obj: Mapping[str, Any]) -> bool:
    """tpu-webhook.io/ignore: "true" on the object (its Context says the same)."""
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return isinstance(labels, dict) and labels.get(OPT_OUT_LABEL) == "true"


def skips_checks(annotations: Mapping[str, Any]) -> bool:
    """GKE's escape hatch on a Pod (template)."""
    return annotations.get(SKIP_CHECK_ANNOTATION) == "true"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}
