"""The operators' builds: each controller manager built from its released Go module by
``tests/tools/operators/build.sh``, cached outside the repository with the CRDs and webhook
manifests of the same module version (the pinned one: each operator's go.mod).
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dev.tools import REPO_ROOT

OPERATORS_DIR = REPO_ROOT / "tests" / "tools" / "operators"
BUILD_SCRIPT = OPERATORS_DIR / "build.sh"
NAMES: tuple[str, ...] = ("jobset", "lws", "kuberay", "trainer")
TITLES = {
    "jobset": "JobSet",
    "lws": "LeaderWorkerSet",
    "kuberay": "KubeRay",
    "trainer": "Kubeflow Trainer",
}
BUILD_TIMEOUT_S = 60 * 60  # cold: a few minutes per operator on 2 cores; slow proxies


class OperatorError(RuntimeError):
    """An operator could not be built, installed or started."""


@dataclass(frozen=True)
class OperatorBuild:
    """One folder made by build.sh: ``manager``, ``crds/``, ``webhook/``, ``build-info``."""

    name: str
    dir: Path

    @property
    def manager(self) -> Path:
        return self.dir / "manager"

    @property
    def crds(self) -> Path:
        return self.dir / "crds"

    @property
    def webhook_dir(self) -> Path:
        return self.dir / "webhook"

    @functools.cached_property
    def info(self) -> dict[str, str]:
        """``module``, ``version``, ``main`` and ``tag_time`` of the build."""
        lines = (self.dir / "build-info").read_text().splitlines()
        return dict(line.split(" ", 1) for line in lines if " " in line)

    @property
    def version(self) -> str:
        return self.info["version"]


@functools.cache
def operator_builds(names: tuple[str, ...] = NAMES) -> dict[str, OperatorBuild]:
    """Build (or find cached) the operators with build.sh, once per process."""
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT), *names],
            stdout=subprocess.PIPE,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=True,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise OperatorError(f"{BUILD_SCRIPT} failed: {exc}") from exc
    return builds_from(names, proc.stdout)


def builds_from(names: Sequence[str], stdout: str) -> dict[str, OperatorBuild]:
    """The builds build.sh named on its stdout (one folder per name, in order)."""
    dirs = stdout.strip().splitlines()
    if len(dirs) != len(names):
        raise OperatorError(f"{BUILD_SCRIPT} printed {dirs!r} for {names!r}")
    builds = {name: OperatorBuild(name, Path(d)) for name, d in zip(names, dirs, strict=True)}
    for build in builds.values():
        if not build.manager.is_file() or not any(build.crds.glob("*.yaml")):
            raise OperatorError(f"{build.dir} lacks manager or CRDs")
    return builds


def pinned_module(name: str) -> tuple[str, str]:
    """(module, version) of an operator, as its go.mod pins it (build.sh reads the same line:
    the one single-line `require`)."""
    for line in (OPERATORS_DIR / name / "go.mod").read_text().splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "require" and words[1] != "(":
            return words[1], words[2]
    raise OperatorError(f"{OPERATORS_DIR / name / 'go.mod'} pins no operator module")


def cache_root() -> Path:
    """build.sh's ``$cache_root``."""
    tools = os.environ.get("TPU_WEBHOOK_TOOLS_CACHE") or str(
        Path.home() / ".cache" / "tpu-webhook" / "tools"
    )
    return Path(tools) / "operators"
