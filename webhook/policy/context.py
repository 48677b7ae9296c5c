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


@dataclass(frozen=True, slots=True)
class Context:
    owner: Owner | None  # the controlling owner (ownerReferences, controller: true)
    queue: str | None  # the Kueue queue it waits in
    suspended: bool  # spec.suspend, or a Pod held by scheduling gates
    opted_out: bool  # tpu-webhook.io/ignore: "true": neither checked nor patched
    skip_checks: bool  # cloud.google.com/skip-tpu-webhook-check: "true": not checked

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
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    labels = _mapping(metadata.get("labels"))
    annotations = _mapping(metadata.get("annotations"))
    queue = labels.get(QUEUE_NAME_LABEL) or annotations.get(QUEUE_NAME_LABEL)
    spec = obj.get("spec")
    suspended = isinstance(spec, dict) and (
        spec.get("suspend") is True or bool(spec.get("schedulingGates"))
    )
    return Context(
        owner=controlling_owner(metadata),
        queue=queue if isinstance(queue, str) and queue else None,
        suspended=suspended,
        opted_out=labels.get(OPT_OUT_LABEL) == "true",
        skip_checks=annotations.get(SKIP_CHECK_ANNOTATION) == "true",
    )


def controlling_owner(metadata: Mapping[str, Any]) -> Owner | None:
    owners = metadata.get("ownerReferences")
    for o in owners if isinstance(owners, list) else ():
        if isinstance(o, dict) and o.get("controller") is True:
            group = str(o.get("apiVersion", "")).rpartition("/")[0]
            return Owner(group, str(o.get("kind", "")), str(o.get("name", "")))
    return None


def skips_checks(annotations: Mapping[str, Any]) -> bool:
    """GKE's escape hatch on a Pod (template)."""
    return annotations.get(SKIP_CHECK_ANNOTATION) == "true"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}
