"""A manifest file -> its documents, split and decoded as kubectl's reader does.

k8s.io/apimachinery's YAMLOrJSONDecoder (kubectl 1.35): a stream whose first non-blank character
is `{` is read as JSON values, one after another; if the second value fails to decode, the rest is
read as YAML from the next line. YAML is cut into documents line by line: a line starting with
`---` ends a document and may carry only blanks or a comment after it ("invalid Yaml document
separator"); lines end at `\\n` (a `\\r\\n` becomes `\\n`). Each document is then read by go-yaml
alone, which reads the first YAML document in it. Empty documents and `null` are skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from webhook.manifests.compose import YamlProblem, compose
from webhook.manifests.decode import MAX_OBJECT_BYTES, Decoder, json_size, too_large
from webhook.manifests.resolve import INT64_MAX

_LONE_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class Document:
    line: int  # where the document starts in the file (1-based)
    value: Any
    duplicates: list[tuple[int | None, str]] = field(default_factory=list)  # (line, key)


def documents(text: str) -> Iterator[Document]:
    """Every non-empty document of a manifest stream, in order."""
    start = 0
    if text.lstrip().startswith("{"):
        rest = yield from _json_documents(text)
        if rest is None:
            return
        start = rest
    yield from _yaml_documents(text[start:], text.count("\n", 0, start) + 1)


def _yaml_documents(text: str, first_line: int) -> Iterator[Document]:
    for line, chunk in split_yaml(text, first_line):
        root = compose(chunk, line)
        if root is None:
            continue
        decoder = Decoder()
        value = decoder.decode(root)
        if value is not None:
            yield Document(line, value, list(decoder.duplicates))


def split_yaml(text: str, first_line: int = 1) -> Iterator[tuple[int, str]]:
    """(first line, text) of each document, as k8s.io/apimachinery's YAMLReader cuts them."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    buffer: list[str] = []
    start = first_line
    for number, line in enumerate(lines, first_line):
        line = line.removesuffix("\r")
        if line.startswith("---"):
            rest = line[3:].strip()
            if rest and not rest.startswith("#"):
                raise YamlProblem(f"invalid Yaml document separator: {rest}", number)
            if buffer:
                yield start, "".join(buffer)
                buffer, start = [], number + 1
                continue
        if not buffer:
            start = number
        buffer.append(line + "\n")
    if buffer:
        yield start, "".join(buffer)


def _json_documents(text: str) -> Generator[Document, None, int | None]:
    """JSON values from the start of `text`; returns where YAML takes over (None: the end)."""
    objects = _Objects()
    decoder = json.JSONDecoder(object_pairs_hook=objects, parse_constant=_no_constant)
    position, count = 0, 0
    while True:
        start = _skip_blanks(text, position)
        if start >= len(text):
            return None
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError) as error:
            objects.take_duplicates()
            if count > 1:
                line = text.count("\n", 0, start) + 1
                raise YamlProblem(f"json: {_json_reason(error)}", line) from None
            return _after_blank_line(text, position)  # kubectl switches to YAML
        line = text.count("\n", 0, start) + 1
        count += 1
        position = end
        value = _json_cleaned(value, text[start:end])
        if json_size(value) > MAX_OBJECT_BYTES:
            raise YamlProblem(too_large(), line)
        yield Document(line, value, [(None, key) for key in objects.take_duplicates()])


def _after_blank_line(text: str, position: int) -> int:
    """consumeWhitespace: blanks up to and including the first line break."""
    while position < len(text) and text[position].isspace():
        position += 1
        if text[position - 1] == "\n":
            break
    return position


class _Objects:
    """object_pairs_hook with Go's rule for a repeated key (the last wins), remembered."""

    def __init__(self) -> None:
        self.duplicates: list[str] = []

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    self.duplicates.append(key)
                seen.add(key)
        return obj

    def take_duplicates(self) -> list[str]:
        taken, self.duplicates = self.duplicates, []
        return taken


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


def _json_reason(error: BaseException) -> str:
    if isinstance(error, RecursionError):
        return "exceeded max depth"
    return str(error).split(":")[0]


def _skip_blanks(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


def _json_cleaned(value: Any, source: str) -> Any:
    """kubectl's view of a JSON value: big integers are floats, lone surrogates U+FFFD."""
    if not isinstance(value, dict | list):
        return value
    fix_text = bool(_LONE_SURROGATE_ESCAPE.search(source))
    pending = [value]
    while pending:
        item = pending.pop()
        entries = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in list(entries):
            if isinstance(child, dict | list):
                pending.append(child)
            elif isinstance(child, int) and not isinstance(child, bool):
                if not -(2**63) <= child <= INT64_MAX:
                    item[key] = float(child)
            elif fix_text and isinstance(child, str) and _SURROGATE.search(child):
                item[key] = _SURROGATE.sub("\ufffd", child)
        if fix_text and isinstance(item, dict):
            for key in [k for k in item if _SURROGATE.search(k)]:
                item[_SURROGATE.sub("\ufffd", key)] = item.pop(key)
    return value
