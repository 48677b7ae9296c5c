"""Our manifest reader against the table of what kubectl reads (tests/support/manifest_cases.py;
the e2e suite checks the same table against the real kubectl), and its limits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.manifest_cases import CASES, HEAD, Case, config_map
from webhook.manifests import MAX_FILE_BYTES, ManifestError, objects_in, read_objects
from webhook.manifests.decode import allowed_alias_ratio


def read(text: str) -> tuple[list[Any], list[str]]:
    warnings: list[str] = []
    return [obj for _, obj in objects_in(text, "f.yaml", warnings.append)], warnings


def canonical(value: Any) -> str:
    """JSON text with sorted keys, numbers as kubectl's JSON writes them, at any depth."""
    out: list[str] = []
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str) and item in _CLOSERS:
            out.append(_CLOSERS[item])
        elif isinstance(item, dict):
            pending.append("\0}")
            for key in sorted(item, reverse=True):
                pending += [item[key], _Text(json.dumps(key) + ":")]
            out.append("{")
        elif isinstance(item, list):
            pending.append("\0]")
            pending += reversed(item)
            out.append("[")
        elif isinstance(item, _Text):
            out.append(item.text)
        elif isinstance(item, float) and item.is_integer():
            out.append(str(int(item)) + ",")
        else:
            out.append(json.dumps(item) + ",")
    return "".join(out)


_CLOSERS = {"\0}": "},", "\0]": "],"}


class _Text:
    def __init__(self, text: str) -> None:
        self.text = text


def same_json(a: Any, b: Any) -> bool:
    """Equal as kubectl's JSON: 1 and 1.0 alike, but true is not 1."""
    return canonical(a) == canonical(b)


@pytest.mark.parametrize("case", [c for c in CASES if c.objects is not None], ids=str)
def test_reads_what_kubectl_reads(case: Case) -> None:
    objects, warnings = read(case.text)
    assert same_json(objects, case.objects)
    assert [w for w in warnings if case.warning and case.warning in w] == (
        warnings if case.warning else []
    )
    assert len(warnings) == (1 if case.warning else 0)


@pytest.mark.parametrize("case", [c for c in CASES if c.objects is None], ids=str)
def test_refuses_what_kubectl_refuses_in_one_line_naming_the_file(case: Case) -> None:
    with pytest.raises(ManifestError) as refused:
        read(case.text)
    message = str(refused.value)
    assert message.startswith("f.yaml: ")
    assert case.error in message
    assert "\n" not in message
    assert len(message) < 300


def test_an_object_over_3_mib_is_refused_as_the_api_server_refuses_it() -> None:
    text = HEAD + "data:\n  k: " + "x" * (3 * 1024 * 1024) + "\n"
    with pytest.raises(ManifestError, match="larger than the 3 MiB the API server accepts"):
        read(text)


def test_an_object_just_under_3_mib_is_read() -> None:
    (obj,), _ = read(HEAD + "data:\n  k: " + "x" * (3 * 1024 * 1024 - 200) + "\n")
    assert len(obj["data"]["k"]) == 3 * 1024 * 1024 - 200


def test_a_file_over_the_size_limit_is_refused_before_parsing(tmp_path: Any) -> None:
    path = tmp_path / "huge.yaml"
    path.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(ManifestError) as refused:
        list(read_objects(str(path)))
    assert str(refused.value) == (
        f"{path}: larger than 16 MiB; split it (the API server takes at most 3 MiB per object)"
    )


def test_invalid_utf8_becomes_the_replacement_character_as_in_kubectl(tmp_path: Any) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(HEAD.encode() + b"data:\n  k: caf\xe9\n")
    ((_, obj),) = list(read_objects(str(path)))
    assert obj == config_map(data={"k": "caf\ufffd"})


@pytest.mark.parametrize(
    ("decoded", "ratio"),
    [(1_000, 0.99), (400_000, 0.99), (2_200_000, 0.545), (4_000_000, 0.10), (9_000_000, 0.10)],
)
def test_the_alias_ratio_is_go_yamls(decoded: int, ratio: float) -> None:
    assert allowed_alias_ratio(decoded) == pytest.approx(ratio)


def test_a_large_document_with_few_aliases_is_read() -> None:
    # 2,000 map entries and 500 uses of a small anchor: 20 % of the work comes from aliases
    entries = "".join(f"  k{i}: v\n" for i in range(2_000))
    uses = "".join(f"  u{i}: *a\n" for i in range(500))
    (obj,), _ = read(HEAD + "x: &a {b: 1}\ndata:\n" + entries + uses)
    assert len(obj["data"]) == 2_500
    assert obj["data"]["u499"] == {"b": 1}
