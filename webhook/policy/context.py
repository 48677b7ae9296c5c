"""What an object says about how it is run, read once per TPU object: its controlling owner,
whether Kueue queues it or it is suspended, and whether it opted out of the webhook."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.catalog.tpu import OPT_OUT_LABEL, QUEUE_NAME_LABEL, SKIP_CHECK_ANNOTATION
from webhook.policy.bounds import MAX_OWNER_REFERENCES
from webhook.policy.exemptions import EXEMPTIONS, Exemptions

# What a controlling owner of (group, kind) means for its child: "known", "unknown" or None
# (no owner at all): policy/workloads.owner_role, passed in (the table imports this module).
OwnerRole = Callable[[str, str], str | None]


@dataclass(frozen=True, slots=True)
class Owner:
    group: str
    kind: str
    name: str
    # Whether the workload table knows the kind as a maker of workloads: a child of a known
    # owner is decided for what holds for any pod spec; a child of a custom kind the table does
    # not know is decided as written, its slice findings only warned about.
    known: bool = True

    def describe(self) -> str:
        """`TrainJob "train"`."""
        return f'{self.kind} "{self.name}"'


class Context:
    """Read once per TPU object (a plain class: a frozen dataclass pays a setattr per field)."""

    __slots__ = ("opted_out", "owner", "queue", "skip_checks", "suspended")

    def __init__(
        self, obj: Mapping[str, Any], role: OwnerRole, exemptions: Exemptions = EXEMPTIONS
    ) -> None:
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        labels = metadata.get("labels")
        if not isinstance(labels, dict):
            labels = {}
        annotations = metadata.get("annotations")
        if not isinstance(annotations, dict):
            annotations = {}
        queue = labels.get(QUEUE_NAME_LABEL) or annotations.get(QUEUE_NAME_LABEL)
        spec = obj.get("spec")
        # the controlling owner (ownerReferences, controller: true), when it makes workloads
        self.owner: Owner | None = controlling_owner(metadata, role)
        # the Kueue queue it waits in
        self.queue: str | None = queue if isinstance(queue, str) and queue else None
        # spec.suspend, or a Pod held by scheduling gates
        self.suspended = isinstance(spec, dict) and (
            spec.get("suspend") is True or bool(spec.get("schedulingGates"))
        )
        # tpu-webhook.io/ignore: "true": neither checked nor patched
        self.opted_out = exemptions.opt_out_label and labels.get(OPT_OUT_LABEL) == "true"
        # cloud.google.com/skip-tpu-webhook-check: "true": not checked
        self.skip_checks = (
            exemptions.skip_annotation and annotations.get(SKIP_CHECK_ANNOTATION) == "true"
        )

    def owned_as(self, other: Context) -> Context:
        """This context with `other`'s owner: an old object judged under the new one's."""
        self.owner = other.owner
        return self

    @property
    def child(self) -> bool:
        """Made by a controller the workload table knows: its slice was decided at the owner."""
        return self.owner is not None and self.owner.known

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
        if self.child and self.owner is not None:
            # A controller does not always copy its owner's labels (LWS before v0.10.0 does not
            # put the Kueue queue label on its leader StatefulSet): what its template lacks was
            # decided where the owner was written, and Kueue adds the labels to the Pods it admits.
            return (
                f"it is made by {self.owner.describe()}, checked when that was created, and "
                "Kueue may add the node labels to the Pods it admits"
            )
        return None


def read_context(
    obj: Mapping[str, Any], role: OwnerRole, exemptions: Exemptions = EXEMPTIONS
) -> Context:
    return Context(obj, role, exemptions)


def controlling_owner(metadata: Mapping[str, Any], role: OwnerRole) -> Owner | None:
    """The controlling owner when it makes workloads: a kind of the workload table (known), or a
    custom kind the table does not know. An owner of a built-in kind that makes no workloads
    (a ConfigMap, a Service) is no owner: anyone may write such a reference."""
    owners = metadata.get("ownerReferences")
    if owners is None:
        return None
    for o in owners[:MAX_OWNER_REFERENCES] if isinstance(owners, list) else ():
        if isinstance(o, dict) and o.get("controller") is True:
            api_version, kind, name = o.get("apiVersion"), o.get("kind"), o.get("name")
            if not isinstance(api_version, str) or not isinstance(kind, str):
                return None
            group = api_version.rpartition("/")[0]
            made_by = role(group, kind)
            if made_by is None:
                return None
            return Owner(group, kind, name if isinstance(name, str) else "", made_by == "known")
    return None


def opted_out(obj: Mapping[str, Any], exemptions: Exemptions = EXEMPTIONS) -> bool:
    """tpu-webhook.io/ignore: "true" on the object, where the admin allows it (its Context says
    the same)."""
    if not exemptions.opt_out_label:
        return False
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return isinstance(labels, dict) and labels.get(OPT_OUT_LABEL) == "true"


def skips_checks(annotations: Mapping[str, Any], exemptions: Exemptions = EXEMPTIONS) -> bool:
    """GKE's escape hatch on a Pod (template), where the admin allows it."""
    return exemptions.skip_annotation and annotations.get(SKIP_CHECK_ANNOTATION) == "true"
