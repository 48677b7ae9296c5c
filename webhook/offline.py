"""The CLI's view of manifests: read them as kubectl does (webhook.manifests), and run each
object through the same admission path the API server drives (mutate, apply the patch, validate
the result)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from webhook.admission.dispatch import Policy, review_request
from webhook.admission.review import GroupVersionKind, Request
from webhook.manifests import ManifestError, read_objects
from webhook.policy.violations import Violation

__all__ = ["ManifestError", "Result", "admit", "copy_tree", "read_objects"]


@dataclass
class Result:
    kind: str
    name: str
    obj: Mapping[str, Any]
    stored: Mapping[str, Any]  # the object as the API server would store it
    denials: list[Violation] = field(default_factory=list)
    warnings: list[Violation] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.denials

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "allowed": self.allowed,
            "violations": [_finding(v) for v in self.denials],
            "warnings": [_finding(v) for v in self.warnings],
            "patch": self.patch,
        }


def _finding(v: Violation) -> dict[str, str]:
    return {"code": v.code, "field": str(v.field), "message": v.message}


def admit(obj: Mapping[str, Any], policy: Policy, namespace: str = "default") -> Result:
    """What `kubectl create -f` would get: the mutating then the validating decision."""
    group, _, _version = str(obj.get("apiVersion", "")).rpartition("/")
    kind = str(obj.get("kind", ""))
    raw_meta = obj.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    name = str(meta.get("name") or meta.get("generateName") or "")
    gvk = GroupVersionKind(group, _version, kind)
    request = Request(
        uid="offline",
        kind=gvk,
        operation="CREATE",
        namespace=str(meta.get("namespace") or namespace),
        name=name,
        object=obj,
    )
    mutated = review_request(request, "mutate", policy)
    stored = jsonpatch.apply_patch(copy_tree(obj), list(mutated.patch), in_place=True)
    validated = review_request(
        Request(
            uid="offline",
            kind=gvk,
            operation="CREATE",
            namespace=request.namespace,
            name=name,
            object=stored,
        ),
        "validate",
        policy,
    )
    return Result(
        kind,
        name,
        obj,
        stored,
        list(validated.denials),
        [*mutated.warnings, *validated.warnings],
        list(mutated.patch),
    )


def copy_tree(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a JSON object, without recursion (kubectl reads 10,000 levels)."""
    root: dict[str, Any] = dict(obj)
    pending: list[dict[Any, Any] | list[Any]] = [root]
    while pending:
        item = pending.pop()
        slots: Iterable[Any] = list(item) if isinstance(item, dict) else range(len(item))
        for slot in slots:
            child = item[slot]
            if isinstance(child, Mapping | list):
                copied = dict(child) if isinstance(child, Mapping) else list(child)
                item[slot] = copied
                pending.append(copied)
    return root
