"""Unit tests, and the helpers they share for checking patches as the API server applies them."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch
from jsonpointer import JsonPointer

from webhook.policy.violations import Violation
from webhook.policy.workloads import Workload, workload_for


def workload_of(obj: Mapping[str, Any]) -> Workload:
    """The workload entry for an object's apiVersion and kind (which must be one we serve)."""
    group = str(obj["apiVersion"]).rpartition("/")[0]
    workload = workload_for(group, str(obj["kind"]))
    assert workload is not None, f"no workload for {obj['apiVersion']} {obj['kind']}"
    return workload


def findings(violations: Sequence[Violation]) -> list[tuple[str, str]]:
    """(code, field) of each violation, sorted: comparing two of these is order-insensitive."""
    return sorted((v.code, str(v.field)) for v in violations)


def expected(entries: Sequence[Mapping[str, str]] | None) -> list[tuple[str, str]]:
    """(code, field) of a case file's `violations` or `warnings`, sorted."""
    return sorted((e["code"], e["field"]) for e in entries or ())


def apply(obj: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> Any:
    """The patched copy of `obj`, as the API server would store it."""
    return jsonpatch.apply_patch(copy.deepcopy(obj), [dict(op) for op in ops])


def overwritten(obj: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> list[str]:
    """Paths of `add` operations that land on a key already present: a replace in disguise."""
    doc, hits = copy.deepcopy(obj), []
    for op in ops:
        parts = JsonPointer(op["path"]).parts
        parent = JsonPointer.from_parts(parts[:-1]).resolve(doc)
        if isinstance(parent, Mapping) and parts[-1] in parent:
            hits.append(op["path"])
        doc = jsonpatch.apply_patch(doc, [dict(op)])
    return hits


def leaves(value: Any, at: str = "") -> dict[str, Any]:
    """Every scalar of a document by its JSON Pointer (empty containers may grow: not leaves)."""
    if isinstance(value, Mapping):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return {at: value}
    found: dict[str, Any] = {}
    for key, item in items:
        escaped = str(key).replace("~", "~0").replace("/", "~1")
        found.update(leaves(item, f"{at}/{escaped}"))
    return found


def resolve(doc: Any, pointer: str) -> Any:
    """The value at `pointer`, or a marker when there is none."""
    return JsonPointer(pointer).resolve(doc, MISSING)


MISSING = object()
