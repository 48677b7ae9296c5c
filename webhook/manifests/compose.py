"""YAML text -> a graph of nodes, as go-yaml's parser builds it (anchors, aliases, tags kept).

Built from ruamel's parse events with an explicit stack (no recursion, so a 10,000-level
document costs nothing special). Like go-yaml's `Unmarshal`, only the first document of the text
is read; an anchor is known from the moment its node starts (so `&a [*a]` refers to itself, which
the decoder refuses), and a later anchor of the same name replaces the earlier one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from ruamel.yaml.reader import ReaderError

from webhook.manifests.scanner import KubectlScanner

MAX_DEPTH = 10_000  # go-yaml's max_flow_level and max_indents; Go's JSON decoder's nesting limit
_ANCHOR = re.compile(r"[0-9A-Za-z_-]+")  # go-yaml's is_alpha (ruamel allows more)


class YamlProblem(ValueError):
    """Why a document cannot be read, with its line in the file when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line


@dataclass(slots=True, eq=False)
class Node:
    kind: str  # "scalar", "map", "seq" or "alias"
    line: int  # 1-based, in the file
    tag: str | None = None
    value: str = ""
    plain: bool = False  # go-yaml's `implicit`: resolved by its text (plain, no specific tag)
    children: list[Node] = field(default_factory=list)  # map: key, value, key, value, ...
    target: Node | None = None  # what an alias refers to


def compose(text: str, first_line: int = 1) -> Node | None:
    """The first document of `text` (None when it holds none). `first_line` is text's line."""
    yaml = YAML(typ="safe", pure=True)
    yaml.Scanner = KubectlScanner
    events = yaml.parse(text)
    try:
        return _build(events, first_line - 1)
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + first_line if mark is not None else None
        problem = error.problem or error.context or "invalid YAML"
        raise YamlProblem(_one_line(problem), line) from None
    except ReaderError as error:
        line = text.count("\n", 0, max(error.position, 0)) + first_line
        raise YamlProblem(_one_line(error.reason), line) from None
    except YAMLError as error:
        raise YamlProblem(_one_line(str(error))) from None
    finally:
        events.close()


def _build(events: Iterable[Any], offset: int) -> Node | None:
    anchors: dict[str, Node] = {}
    stack: list[Node] = []
    root: Node | None = None
    for event in events:
        if isinstance(event, DocumentEndEvent):
            break
        if isinstance(event, MappingEndEvent | SequenceEndEvent):
            stack.pop()
            continue
        line = event.start_mark.line + 1 + offset
        anchor = getattr(event, "anchor", None)
        if anchor is not None and not _ANCHOR.fullmatch(anchor):
            raise YamlProblem("did not find expected alphabetic or numeric character", line)
        if isinstance(event, AliasEvent):
            target = anchors.get(event.anchor)
            if target is None:
                raise YamlProblem(f"unknown anchor '{event.anchor}' referenced", line)
            node = Node("alias", line, value=event.anchor, target=target)
        elif isinstance(event, ScalarEvent):
            plain = bool(event.implicit[0])
            node = Node("scalar", line, event.tag, event.value, plain)
        elif isinstance(event, MappingStartEvent | SequenceStartEvent):
            kind = "map" if isinstance(event, MappingStartEvent) else "seq"
            node = Node(kind, line, event.tag)
        else:  # stream and document starts
            continue
        if anchor is not None and node.kind != "alias":
            anchors[anchor] = node
        if stack:
            stack[-1].children.append(node)
        else:
            root = node
        if node.kind in ("map", "seq"):
            stack.append(node)
            if len(stack) > MAX_DEPTH:
                raise YamlProblem(f"exceeded max depth of {MAX_DEPTH}", line)
    return root


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
