"""The table of what kubectl reads (tests/support/manifest_cases.py) against the real kubectl.

`kubectl annotate --local -f FILE ... -o json` reads a file exactly as `kubectl create -f` does
(same builder, same YAML-or-JSON decoder) without a server; the unit tests hold our reader to the
same table. The API server's own limit (3 MiB per object) needs the server: `create --dry-run`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dev.controlplane import ControlPlane
from dev.tools import tools_dir
from tests.support.manifest_cases import CASES, HEAD, Case
from tests.unit.test_manifests import same_json

pytestmark = pytest.mark.e2e

PROBE = "tpu-webhook.io/probe"


@contextlib.contextmanager
def deep_json() -> Iterator[None]:
    """Python's JSON decoder recurses; kubectl's output may nest 10,000 levels."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(40_000)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def kubectl_reads(path: Path) -> tuple[int, list[dict[str, Any]], str]:
    kubectl = str(tools_dir() / "kubectl")
    proc = subprocess.run(
        [kubectl, "annotate", "--local", "-f", str(path), f"{PROBE}=1", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    objects: list[dict[str, Any]] = []
    decoder, text, at = json.JSONDecoder(), proc.stdout, 0
    with deep_json():
        while text[at:].strip():
            value, at = decoder.raw_decode(text, len(text) - len(text[at:].lstrip()))
            objects.append(value)
    for obj in objects:
        annotations = obj["metadata"].pop("annotations")
        assert annotations == {PROBE: "1"}
    return proc.returncode, objects, proc.stderr


@pytest.mark.parametrize("case", CASES, ids=str)
def test_kubectl_reads_each_case_as_the_table_says(case: Case, tmp_path: Path) -> None:
    path = tmp_path / "manifest.yaml"
    path.write_bytes(case.text.encode("utf-8", "surrogatepass"))
    code, objects, stderr = kubectl_reads(path)
    if case.objects is None:
        assert (code, objects) == (1, []), stderr
        assert stderr.startswith("error: "), stderr
    else:
        assert code == 0, stderr
        assert same_json(objects, case.objects)


def test_kubectl_create_refuses_an_object_over_3_mib(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(HEAD + "data:\n  k: " + "x" * (3 * 1024 * 1024) + "\n")
    result = control_plane.kubectl("create", "--dry-run=server", "-f", str(path))
    assert result.returncode == 1
    assert "Request entity too large: limit is 3145728" in result.stderr
