"""`kubectl tpu`: the CLI found and run by the real kubectl's plugin discovery (kubectl v1.35.4
from tests/tools), as installed by `pip install` ([project.scripts] kubectl-tpu)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from dev.tools import REPO_ROOT, tools_dir

pytestmark = pytest.mark.e2e

SCRIPTS = Path(sys.executable).parent  # the venv's bin: tpu-webhook and kubectl-tpu
BROKEN = "examples/broken/wrong-chip-count.yaml"


def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.pathsep.join([str(tools_dir()), str(SCRIPTS), "/usr/bin", "/bin"]),
        "HOME": os.environ.get("HOME", "/root"),
        "KUBECONFIG": "/nonexistent",  # plugins are local; nothing may need a cluster
    }
    return subprocess.run(
        [str(tools_dir() / "kubectl"), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_kubectl_plugin_list_finds_kubectl_tpu() -> None:
    listed = kubectl("plugin", "list")
    assert listed.returncode == 0, listed.stderr
    assert f"{SCRIPTS}/kubectl-tpu" in listed.stdout.splitlines()
    assert "warning" not in listed.stderr.lower()


def test_kubectl_tpu_explain_prints_the_shape_and_a_job() -> None:
    explained = kubectl("tpu", "explain", "tpu-v6e-slice", "4x4")
    header, _, manifests = explained.stdout.partition("---\n")
    assert (explained.returncode, explained.stderr) == (0, "")
    assert "  4x4 = 16 chips at 4 per host needs 4 hosts" in header.splitlines()
    kinds = [d["kind"] for d in YAML(typ="safe", pure=True).load_all(manifests)]
    assert kinds == ["Service", "Job"]


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_kubectl_tpu_explain_prints_json_and_yaml(output: str) -> None:
    explained = kubectl("tpu", "explain", "tpu-v6e-slice", "4x4", "-o", output)
    data = (
        json.loads(explained.stdout)
        if output == "json"
        else YAML(typ="safe", pure=True).load(explained.stdout)
    )
    assert explained.returncode == 0
    assert data["shapes"] == [
        {"topology": "4x4", "chips": 16, "chipsPerHost": 4, "hosts": 4,
         "machineType": "ct6e-standard-4t"},
    ]  # fmt: skip
    assert [m["kind"] for m in data["manifests"]] == ["Service", "Job"]


def test_kubectl_tpu_check_exits_1_for_a_denied_file_with_the_message() -> None:
    checked = kubectl("tpu", "check", "-f", BROKEN)
    assert checked.returncode == 1
    assert checked.stdout.splitlines()[0] == "Pod/train-wrong-chips: denied"
    assert "tpu-v5-lite-podslice 2x4 runs 4 or 8 chips per host" in checked.stdout


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_kubectl_tpu_check_prints_json_and_yaml(output: str) -> None:
    checked = kubectl("tpu", "check", "-f", "examples/", "-o", output)
    loaded = YAML(typ="safe", pure=True).load(checked.stdout)  # JSON is YAML
    assert checked.returncode == 1
    assert {(r["kind"], r["name"], r["allowed"]) for r in loaded} >= {
        ("Pod", "train-wrong-chips", False),
        ("Job", "tpu-available-chips", True),
    }


def test_kubectl_tpu_exits_2_for_a_file_it_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / "tab.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n\tname: a\n")
    checked = kubectl("tpu", "check", "-f", str(path))
    assert (checked.returncode, checked.stdout) == (2, "")
    assert checked.stderr == (
        f"error: {path}: line 4: found character '\\t' that cannot start any token\n"
    )


def test_kubectl_tpu_help_is_named_as_kubectl_shows_it() -> None:
    for args in (("tpu",), ("tpu", "--help"), ("tpu", "check", "-h")):
        helped = kubectl(*args)
        assert helped.returncode == 0
        assert helped.stdout.startswith("usage: kubectl tpu")
    assert kubectl("tpu", "--version").stdout == "kubectl tpu 0.1.0\n"
