"""A node graph -> the JSON value kubectl sends: go-yaml v2's `decoder.unmarshal`, then
sigs.k8s.io/yaml's conversion to JSON, then kubectl's JSON decoder.

The first pass follows go-yaml's decode.go (go.yaml.in/yaml/v2 v2.4.3, which kubectl 1.35 reads
YAML with, through sigs.k8s.io/yaml 1.6), in its order of work:

- every node decoded counts, an alias's target once per use; once more than 100 of them came
  through an alias and more than 1,000 were decoded, the share that came through aliases may not
  pass 99 % (up to 400,000 decoded), falling to 10 % at 4,000,000: "document contains excessive
  aliasing". An alias bomb stops within a few thousand steps, where expanding it would not end;
- an alias inside its own anchor: "anchor 'a' value contains itself";
- `<<` merges apply in order (a merge overrides keys before it, later keys override it); a
  sequence of maps merges from the last, so the first wins;
- maps are Go maps: `1`, `1.0`, `true` and `"1"` are different keys, a repeated key keeps the last
  value (kubectl neither refuses nor warns: the repeats are reported to the caller).

The second pass sees only what survived, as sigs.k8s.io/yaml does: keys become strings (a null
key is an error), an infinite or NaN number is an error, and then Go's JSON decoder nests at most
10,000 levels and the API server takes at most 3 MiB per request ("Request entity too large").
Both passes run on explicit stacks: no recursion, whatever the depth.
"""

from __future__ import annotations

import math
import re
from typing import Any

from webhook.manifests.compose import MAX_DEPTH, Node, YamlProblem
from webhook.manifests.resolve import (
    MERGE,
    ResolveError,
    json_number,
    key_string,
    scalar_value,
    typed_key,
)

MAX_OBJECT_BYTES = 3 * 1024 * 1024  # kube-apiserver's request body limit (3145728)
_ALIAS_LOW, _ALIAS_HIGH = 400_000, 4_000_000
_SURROGATE = re.compile("[\ud800-\udfff]")
_WANT_MAP = "map merge requires map or sequence of maps as the value"

GoMap = dict[tuple[str, Any], Any]


def allowed_alias_ratio(decoded: int) -> float:
    """go-yaml's allowedAliasRatio."""
    if decoded <= _ALIAS_LOW:
        return 0.99
    if decoded >= _ALIAS_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decoded - _ALIAS_LOW) / (_ALIAS_HIGH - _ALIAS_LOW)


def too_large() -> str:
    return (
        f"the object is larger than the {MAX_OBJECT_BYTES // (1024 * 1024)} MiB the API server "
        "accepts (Request entity too large)"
    )


class _NonFinite(float):
    """An infinite or NaN scalar, with its line: an error only if it survives to the JSON."""

    line: int


class Decoder:
    """Decodes one document; `duplicates` lists (line, key) of keys given twice in a map."""

    def __init__(self) -> None:
        self.decoded = 0
        self.aliased = 0
        self.alias_depth = 0
        self.expanding: set[int] = set()  # alias nodes being expanded
        self.size = 0  # JSON bytes of everything decoded, overwritten values too
        self.duplicates: list[tuple[int, str]] = []
        self.key_lines: dict[tuple[int, tuple[str, Any]], int] = {}
        self.stack: list[tuple[Any, ...]] = []

    def decode(self, root: Node) -> Any:
        out: list[Any] = []
        self.stack.append(("node", root, out, None))
        while self.stack:
            task = self.stack.pop()
            getattr(self, "_" + task[0])(*task[1:])
        return _to_json(out[0], root.line, self.key_lines)

    def _count(self, node: Node) -> None:
        self.decoded += 1
        if self.alias_depth:
            self.aliased += 1
        if (
            self.aliased > 100
            and self.decoded > 1000
            and self.aliased / self.decoded > allowed_alias_ratio(self.decoded)
        ):
            raise YamlProblem("document contains excessive aliasing", node.line)

    def _grow(self, size: int, line: int) -> None:
        self.size += size
        if self.size > 4 * MAX_OBJECT_BYTES:  # far beyond: stop before holding all of it
            raise YamlProblem(too_large(), line)

    def _node(self, node: Node, out: list[Any], into: GoMap | None) -> None:
        self._count(node)
        if node.kind == "alias":
            if id(node) in self.expanding:
                raise YamlProblem(f"anchor '{node.value}' value contains itself", node.line)
            self.expanding.add(id(node))
            self.alias_depth += 1
            self.stack.append(("alias_done", node))
            self.stack.append(("node", node.target, out, into))
        elif node.kind == "scalar":
            value = self._scalar(node)
            self._grow(len(value) + 3 if isinstance(value, str) else 6, node.line)
            out.append(value)
        elif node.kind == "seq":
            items: list[Any] = []
            out.append(items)
            self._grow(1 + len(node.children), node.line)
            for child in reversed(node.children):
                self.stack.append(("node", child, items, None))
        else:
            mapping: GoMap = {} if into is None else into
            if into is None:
                out.append(mapping)
                self._grow(2, node.line)
            self.stack.append(("pairs", node, 0, mapping, set()))

    def _scalar(self, node: Node) -> Any:
        try:
            value = scalar_value(node.tag, node.value, node.plain)
        except ResolveError as error:
            raise YamlProblem(str(error), node.line) from None
        if isinstance(value, str) and _SURROGATE.search(value):
            raise YamlProblem("found invalid Unicode character escape code", node.line)
        if isinstance(value, float) and not math.isfinite(value):
            value = _NonFinite(value)
            value.line = node.line
        return value

    def _alias_done(self, node: Node) -> None:
        self.alias_depth -= 1
        self.expanding.discard(id(node))

    def _pairs(self, node: Node, index: int, mapping: GoMap, given: set[Any]) -> None:
        if index >= len(node.children):
            return
        key, value = node.children[index], node.children[index + 1]
        self.stack.append(("pairs", node, index + 2, mapping, given))
        if key.kind == "scalar" and key.value == "<<" and (key.plain or key.tag == MERGE):
            self._merge(value, mapping)
            return
        pair: list[Any] = []
        self.stack.append(("set", pair, mapping, given, key.line))
        self.stack.append(("node", value, pair, None))
        self.stack.append(("key", key, pair))
        self.stack.append(("node", key, pair, None))

    def _key(self, key: Node, pair: list[Any]) -> None:
        if isinstance(pair[0], dict | list):
            kind = "[]interface {}" if isinstance(pair[0], list) else "map[interface {}]"
            raise YamlProblem(f"invalid map key: {kind}", key.line)
        pair[0] = typed_key(pair[0])

    def _set(self, pair: list[Any], mapping: GoMap, given: set[Any], line: int) -> None:
        key, value = pair
        if key in given:
            self.duplicates.append((line, str(key[1])))
        given.add(key)
        if key[0] in "nu":
            self.key_lines[id(mapping), key] = line
        self._grow(len(str(key[1])) + 4, line)
        mapping[key] = value

    def _merge(self, value: Node, mapping: GoMap) -> None:
        if value.kind == "seq":
            parts = list(reversed(value.children))
        elif value.kind in ("map", "alias"):
            parts = [value]
        else:
            raise YamlProblem(_WANT_MAP, value.line)
        for part in parts:
            if (part.target or part).kind != "map":
                raise YamlProblem(_WANT_MAP, part.line)
        for part in reversed(parts):  # the stack runs them in `parts` order
            self.stack.append(("node", part, [], mapping))


def _to_json(raw: Any, line: int, key_lines: dict[tuple[int, tuple[str, Any]], int]) -> Any:
    """The survivors as JSON values: string keys, finite numbers, depth and size checked."""
    result: list[Any] = []
    pending: list[tuple[Any, list[Any] | dict[str, Any], Any, int]] = [(raw, result, None, 0)]
    size = 0
    while pending:
        item, parent, slot, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth + 1 > MAX_DEPTH:
                raise YamlProblem(f"exceeded max depth of {MAX_DEPTH}", line)
            size += 1 + max(len(item), 1)
            value: Any = {} if isinstance(item, dict) else [None] * len(item)
            if isinstance(item, dict):
                for key, child in item.items():
                    try:
                        name = key_string(key)
                    except ResolveError as error:
                        at = key_lines.get((id(item), key), line)
                        raise YamlProblem(str(error), at) from None
                    size += len(name) + 3
                    value[name] = None
                    pending.append((child, value, name, depth + 1))
            else:
                pending.extend((child, value, i, depth + 1) for i, child in enumerate(item))
        elif isinstance(item, int | float) and not isinstance(item, bool):
            try:
                value = json_number(item)
            except ResolveError as error:
                raise YamlProblem(str(error), getattr(item, "line", line)) from None
            size += len(str(value))
        else:
            value = item
            size += len(item) + 2 if isinstance(item, str) else 4
        if size > MAX_OBJECT_BYTES:
            raise YamlProblem(too_large(), line)
        if isinstance(parent, list) and slot is None:
            parent.append(value)
        else:
            parent[slot] = value
    return result[0]


def json_size(value: Any) -> int:
    """Bytes of `value` as compact JSON, not counting escapes (so never more than the truth)."""
    size, pending = 0, [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            size += 1 + max(len(item), 1) + sum(len(key) + 3 for key in item)
            pending.extend(item.values())
        elif isinstance(item, list):
            size += 1 + max(len(item), 1)
            pending.extend(item)
        else:
            size += len(item) + 2 if isinstance(item, str) else len(str(item))
    return size
