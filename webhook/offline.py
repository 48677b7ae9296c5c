"""The CLI's view of manifests: read them strictly, and run each object through the same
admission path the API server drives (mutate, apply the patch, validate the result)."""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from webhook.admission.dispatch import Policy, review_request
from webhook.admission.review import GroupVersionKind, Request
from webhook.policy.violations import Violation

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class ManifestError(ValueError):
    """Input that cannot be read as Kubernetes objects (exit code 2)."""


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


def read_objects(source: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(origin, object) for every object in a file, a directory of manifests, or `-` (stdin)."""
    if source == "-":
        yield from _parse(sys.stdin.read(), "<stdin>")
        return
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in MANIFEST_SUFFIXES)
    elif path.exists():
        files = [path]
    else:
        raise ManifestError(f"{source}: no such file or directory")
    for file in files:
        try:
            text = file.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ManifestError(f"{file}: cannot read: {error}") from None
        yield from _parse(text, str(file))


def _parse(text: str, origin: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    yaml = YAML(typ="safe", pure=True)  # JSON is YAML; duplicate keys are errors with a line
    try:
        documents = list(yaml.load_all(text))
    except YAMLError as error:
        raise ManifestError(f"{origin}: {error}") from None
    for document in documents:
        if document is None:
            continue
        if not isinstance(document, Mapping) or "kind" not in document:
            raise ManifestError(f"{origin}: a document is not a Kubernetes object")
        if document.get("kind") == "List" or str(document.get("kind", "")).endswith("List"):
            items = document.get("items") or []
            for item in items:
                if not isinstance(item, Mapping):
                    raise ManifestError(f"{origin}: a List item is not an object")
                yield origin, item
        else:
            yield origin, document


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
    stored = jsonpatch.apply_patch(copy.deepcopy(dict(obj)), list(mutated.patch))
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
