"""Kubernetes manifests read as `kubectl create -f` reads them.

A file kubectl reads is never "unreadable" here (tabs where go-yaml allows them, duplicate keys,
YAML 1.1 scalars, custom tags, a JSON stream), and what kubectl refuses is refused with one line
naming the file, the line and the problem: an alias bomb ("document contains excessive
aliasing", go-yaml's rule), nesting beyond 10,000 levels, an object over the API server's 3 MiB.
Work and memory are bounded: a file is read up to MAX_FILE_BYTES, nothing recurses, and an alias
bomb stops within a few thousand steps. See stream.py, compose.py, decode.py and resolve.py.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from webhook.manifests.compose import YamlProblem
from webhook.manifests.stream import documents

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILE_BYTES = 16 * 1024 * 1024  # far above any manifest; parsing it takes about 20 s

Warn = Callable[[str], None]


class ManifestError(ValueError):
    """Input that cannot be read as Kubernetes objects (exit code 2)."""


def read_objects(source: str, warn: Warn | None = None) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(origin, object) for every object in a file, a directory of manifests, or `-` (stdin).

    `warn` receives one line per thing kubectl accepts silently but a user would want to know
    (a duplicate key: kubectl keeps the last value).
    """
    if source == "-":
        stdin = getattr(sys.stdin, "buffer", sys.stdin)  # bytes; text when replaced (tests)
        yield from objects_in(_read(stdin, "<stdin>"), "<stdin>", warn)
        return
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())
    elif path.exists():
        files = [path]
    else:
        raise ManifestError(f"{source}: no such file or directory")
    for file in files:
        try:
            with file.open("rb") as stream:
                text = _read(stream, str(file))
        except OSError as error:
            raise ManifestError(f"{file}: cannot read: {error.strerror or error}") from None
        yield from objects_in(text, str(file), warn)


def _read(stream: BinaryIO | TextIO, origin: str) -> str:
    data = stream.read(MAX_FILE_BYTES + 1)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    if len(data) > MAX_FILE_BYTES:
        raise ManifestError(
            f"{origin}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; "
            "split it (the API server takes at most 3 MiB per object)"
        )
    return data.decode("utf-8", "replace")  # as kubectl: invalid UTF-8 becomes U+FFFD


def objects_in(
    text: str, origin: str, warn: Warn | None = None
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The Kubernetes objects in a manifest's text (List items flattened, as kubectl does)."""
    try:
        for document in documents(text):
            for line, key in document.duplicates:
                if warn is not None:
                    at = f"line {line}: " if line else ""
                    warn(f"{origin}: {at}duplicate key {key!r}: kubectl keeps the last value")
            yield from _objects(document.value, origin, document.line)
    except YamlProblem as problem:
        raise ManifestError(f"{origin}: {problem}") from None


def _objects(value: Any, origin: str, line: int) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if not isinstance(value, dict) or "kind" not in value:
        raise ManifestError(f"{origin}: line {line}: a document is not a Kubernetes object")
    if str(value.get("kind", "")).endswith("List") and "items" in value:
        items = value.get("items") or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ManifestError(f"{origin}: line {line}: a List item is not an object")
        for item in items:
            yield origin, item
    else:
        yield origin, value
