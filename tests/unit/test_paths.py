"""FieldPath: printed the Kubernetes way, addressed as an RFC 6901 JSON Pointer."""

from __future__ import annotations

import jsonpatch
import pytest
from jsonpointer import JsonPointer

from webhook.policy.paths import FieldPath

TPU_LIMIT = (
    FieldPath.root("spec", "template", "spec")
    .child("containers")
    .index(0)
    .child("resources", "limits")
    .key("google.com/tpu")
)


def test_prints_fields_with_dots_indexes_and_keys_in_brackets() -> None:
    assert str(TPU_LIMIT) == "spec.template.spec.containers[0].resources.limits[google.com/tpu]"


def test_points_with_slashes_and_escapes_the_slash_in_a_key() -> None:
    assert (
        TPU_LIMIT.pointer() == "/spec/template/spec/containers/0/resources/limits/google.com~1tpu"
    )


@pytest.mark.parametrize(
    ("key", "escaped"),
    [
        ("google.com/tpu", "google.com~1tpu"),
        ("a~b", "a~0b"),
        ("~1", "~01"),
        ("/~", "~1~0"),
        ("metadata.annotations['x']", "metadata.annotations['x']"),
        ("", ""),
    ],
)
def test_escapes_tilde_before_slash_as_rfc_6901_requires(key: str, escaped: str) -> None:
    assert FieldPath.root("labels").key(key).pointer() == f"/labels/{escaped}"


@pytest.mark.parametrize("key", ["google.com/tpu", "a~b", "~1", "/~", "x/y/z~"])
def test_a_pointer_resolves_to_the_key_it_was_made_from(key: str) -> None:
    doc = {"labels": {key: "found"}}
    assert JsonPointer(FieldPath.root("labels").key(key).pointer()).resolve(doc) == "found"


def test_an_add_at_an_escaped_pointer_creates_the_literal_key() -> None:
    path = FieldPath.root("limits").key("google.com/tpu")
    patched = jsonpatch.apply_patch(
        {"limits": {}}, [{"op": "add", "path": path.pointer(), "value": 4}]
    )
    assert patched == {"limits": {"google.com/tpu": 4}}


def test_the_root_path_is_empty_in_both_forms() -> None:
    assert (str(FieldPath()), FieldPath().pointer()) == ("", "")


def test_a_path_may_start_with_a_key_or_an_index() -> None:
    assert str(FieldPath().key("a").index(2).child("b")) == "[a][2].b"
    assert FieldPath().key("a").index(2).child("b").pointer() == "/a/2/b"


def test_paths_are_immutable_values() -> None:
    base = FieldPath.root("spec")
    longer = base.child("containers")
    assert (str(base), str(longer)) == ("spec", "spec.containers")
    assert FieldPath.root("spec", "x") == base.child("x")
    assert len({FieldPath.root("spec", "x"), base.child("x")}) == 1
