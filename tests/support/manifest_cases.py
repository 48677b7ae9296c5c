"""How kubectl reads manifest text: one table, checked against our reader (tests/unit) and
against the real kubectl (tests/e2e/test_kubectl_reading.py), so the two cannot drift apart.

Each case is a file's text and either the objects kubectl reads from it (its YAML reader is
go-yaml v2 through sigs.k8s.io/yaml, YAML 1.1, then JSON) or None when kubectl refuses it, with
the words our one-line error says. Observed with kubectl v1.35.4 (`annotate --local -o json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HEAD = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"


def config_map(name: str = "a", **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **fields}


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    objects: list[dict[str, Any]] | None  # None: kubectl refuses the file
    error: str = ""  # in our one-line message when refused
    warning: str = ""  # in our warning when kubectl reads it silently

    def __str__(self) -> str:
        return self.name


def _data(**data: Any) -> list[dict[str, Any]]:
    return [config_map(data=data)]


def _deep(levels: int) -> str:
    return HEAD + "x: " + "[" * levels + "]" * levels + "\n"


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _bomb() -> str:
    lines = [HEAD.rstrip("\n"), "x:", '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"  {name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines) + "\n"


CASES = [
    # tabs: white space wherever go-yaml allows it, refused only as indentation
    Case("a trailing tab after a value", HEAD + "data:\n  k: v\t\n", _data(k="v")),
    Case("a tab after a key's colon", HEAD + "data:\n  k:\tv\n", _data(k="v")),
    Case("a tab before a comment", HEAD + "data:\n  k: v\t# c\n", _data(k="v")),
    Case("a trailing tab after a quoted value", HEAD + 'data:\n  k: "v"\t\n', _data(k="v")),
    Case("a trailing tab after a flow map", HEAD + "data: {k: v}\t\n", _data(k="v")),
    Case("a trailing tab after an empty value", HEAD + "data:\n  k:\t\n", _data(k=None)),
    Case("a tab inside a plain value", HEAD + "data:\n  k: a\tb\n", _data(k="a\tb")),
    Case("a tab after a block scalar's |", HEAD + "data:\n  k: |\t\n    text\n", _data(k="text\n")),
    Case("a tab in a flow map", HEAD + "data: {k: v,\tj: w}\n", _data(k="v", j="w")),
    Case("a tab after a tag", HEAD + "data:\n  k: !!str\t1\n", _data(k="1")),
    Case("a tab after ---", HEAD + "---\t\n" + HEAD, [config_map(), config_map()]),
    Case(
        "a tab as indentation",
        HEAD + "data:\n\tk: v\n",
        None,
        "line 6: found character '\\t' that cannot start any token",
    ),
    Case(
        "a tab-only line inside a map",
        HEAD + "data:\n  k: v\n\t\n  j: w\n",
        None,
        "line 7: found a tab character that violates indentation",
    ),
    Case("a tab after a dash", "apiVersion: v1\nkind: List\nitems:\n-\t{a: 1}\n", None, "line 4"),
    # keys given twice: kubectl keeps the last, silently; we say so
    Case(
        "a duplicate key",
        HEAD + "data:\n  k: v\n  k: w\n",
        _data(k="w"),
        warning="line 7: duplicate key 'k': kubectl keeps the last value",
    ),
    Case(
        "a duplicate key in JSON",
        '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "name": "b"}}',
        [config_map("b")],
        warning="duplicate key 'name'",
    ),
    # merge keys apply in order; in a list of maps the first wins
    Case("a key before a merge", HEAD + "data:\n  k: v\n  <<: {k: w}\n", _data(k="w")),
    Case("a key after a merge", HEAD + "data:\n  <<: {k: w}\n  k: v\n", _data(k="v")),
    Case(
        "a merge of two anchors",
        HEAD + "x: &x {k: 1}\nz: &z {k: 2, j: 3}\ndata:\n  <<: [*x, *z]\n",
        [config_map(x={"k": 1}, z={"k": 2, "j": 3}, data={"k": 1, "j": 3})],
    ),
    Case(
        "an anchor and its alias",
        HEAD + "data: &d\n  k: v\nx: *d\n",
        [config_map(data={"k": "v"}, x={"k": "v"})],
    ),
    # YAML 1.1 scalars, then JSON numbers
    Case(
        "YAML 1.1 booleans",
        HEAD + "x: [yes, No, on, OFF, y, n, true, False]\n",
        [config_map(x=[True, False, True, False, True, False, True, False])],
    ),
    Case(
        "YAML 1.1 and Go integers",
        HEAD + "x: [010, 0x1F, 0o17, 0b101, -0b101, 1_000, 08, +5, -0]\n",
        [config_map(x=[8, 31, 15, 5, -5, 1000, 8, 5, 0])],
    ),
    Case(
        "floats kubectl reads back as integers",
        HEAD + "x: [1e3, 1.0, .5, 2.5, 1e21]\n",
        [config_map(x=[1000, 1, 0.5, 2.5, 1e21])],
    ),
    Case("an integer beyond int64", HEAD + "x: 99999999999999999999\n", [config_map(x=1e20)]),
    Case(
        "strings that look like other things",
        HEAD + "x: [2001-12-14, '1', 1:20, =, .inf_, 1e400, null_]\n",
        [config_map(x=["2001-12-14", "1", "1:20", "=", ".inf_", "1e400", "null_"])],
    ),
    Case("nulls", HEAD + "x: [~, null, Null, NULL, ]\n", [config_map(x=[None, None, None, None])]),
    # tags
    Case(
        "tags",
        HEAD + "x: [!!str 1, !foo v, !!binary aGk=, ! 12, !!int '7', !!float 1]\n",
        [config_map(x=["1", "v", "hi", "12", 7, 1])],
    ),
    Case("a set", HEAD + "x: !!set {a, b}\n", [config_map(x={"a": None, "b": None})]),
    Case("a tag that does not fit", HEAD + "x: !!int yes\n", None, "cannot decode !!bool `yes`"),
    # keys that are not strings
    Case(
        "number and boolean keys",
        HEAD + "data: {1: a, 2.5: b, true: c, 0x10: d}\n",
        _data(**{"1": "a", "2.5": "b", "true": "c", "16": "d"}),
    ),
    Case("a null key", HEAD + "data:\n  ~: v\n", None, "line 6: unsupported map key: null"),
    Case("a list as a key", HEAD + "data:\n  ? [a]\n  : v\n", None, "invalid map key"),
    Case(
        "a null key given twice, the second overwritten",
        HEAD + "x: {~: 1, ~: 2}\n",
        None,
        "unsupported map key: null",
    ),
    Case(
        "an overwritten infinity",
        HEAD + "z: {k: .inf, k: 1}\n",
        [config_map(z={"k": 1})],
        warning="line 5: duplicate key 'k'",
    ),
    Case("a key y, which YAML 1.1 reads as true", HEAD + "y: 1\n", [config_map(true=1)]),
    Case("infinity", HEAD + "x: .inf\n", None, "line 5: json: unsupported value: +Inf"),
    # aliases, anchors and depth
    Case("an alias bomb", _bomb(), None, "document contains excessive aliasing"),
    Case("an alias inside its anchor", HEAD + "x: &a [*a]\n", None, "anchor 'a' value contains"),
    Case("an unknown anchor", HEAD + "x: *nope\n", None, "unknown anchor 'nope' referenced"),
    Case("nesting 9,999 levels in an object", _deep(9_999), [config_map(x=_nested(9_999))]),
    Case("nesting 10,000 levels in an object", _deep(10_000), None, "exceeded max depth of 10000"),
    Case("nesting a million levels", HEAD + "x: " + "[" * 1_000_000, None, "exceeded max depth"),
    # the stream: kubectl's document separator, JSON streams, encodings
    Case(
        "content after ---",
        HEAD + "--- {a: 1}\n",
        None,
        "line 5: invalid Yaml document separator: {a: 1}",
    ),
    Case("a %YAML directive", "%YAML 1.1\n---\n" + HEAD, None, "expected '<document start>'"),
    Case("empty documents", "---\n# c\n---\n" + HEAD + "---\n", [config_map()]),
    Case("a ... document end", HEAD + "...\n---\n" + HEAD, [config_map(), config_map()]),
    Case(
        "a stream of JSON objects",
        '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}\n'
        '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}\n',
        [config_map(), config_map("b")],
    ),
    Case(
        "a JSON object, then YAML",
        '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}\n---\n' + HEAD,
        [config_map(), config_map()],
    ),
    Case("CRLF line ends", (HEAD + "data:\n  k: v\n").replace("\n", "\r\n"), _data(k="v")),
    Case("a byte order mark", "\ufeff" + HEAD, [config_map()]),
    Case("a control character", HEAD + "data:\n  k: a\x01b\n", None, "line 6"),
    Case("an escaped lone surrogate", HEAD + 'data:\n  k: "\\ud83d"\n', None, "invalid Unicode"),
    Case("not an object", "hello\n", None, "line 1: a document is not a Kubernetes object"),
    Case(
        "a List",
        "apiVersion: v1\nkind: List\nitems:\n- " + HEAD.replace("\n", "\n  ").rstrip() + "\n",
        [config_map()],
    ),
]
