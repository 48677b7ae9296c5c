"""The image's virtual environment, installed once for every test of the image."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL = REPO_ROOT / "docker" / "install.sh"
INSTALL_TIMEOUT_S = 540
SBOM_NAME = "sbom.cdx.json"


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory, pypi: None) -> Path:
    """docker/install.sh run into a new venv, exactly as the builder stage runs it; its SBOM is
    written next to it (the `sbom` fixture). From PyPI: its tests are marked `registry`."""
    target = tmp_path_factory.mktemp("image") / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV"))}
    env["PYTHON"] = sys.executable
    proc = subprocess.run(
        ["sh", str(INSTALL), str(target), str(REPO_ROOT), str(target.parent / SBOM_NAME)],
        capture_output=True,
        text=True,
        env=env,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, f"install.sh failed:\n{proc.stdout}\n{proc.stderr}"
    return target


@pytest.fixture(scope="session")
def sbom(venv: Path) -> Path:
    """The CycloneDX SBOM install.sh wrote of `venv`."""
    return venv.parent / SBOM_NAME
