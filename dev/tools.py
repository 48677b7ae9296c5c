"""The Kubernetes tools of dev/ (etcd, kube-apiserver, kube-controller-manager, kubectl, helm),
built from Go modules by ``tests/tools/build.sh`` and cached outside the repository.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO_ROOT / "tests" / "tools" / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm")
BUILD_TIMEOUT_S = 60 * 60  # a cold build on 2 cores measured 261 s; allow for slow proxies


class ToolsError(RuntimeError):
    """The tools could not be built or found."""


@functools.cache
def tools_dir() -> Path:
    """Build (or find cached) tools with build.sh, once per process; return the bin dir."""
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            stdout=subprocess.PIPE,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=True,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise ToolsError(f"{BUILD_SCRIPT} failed: {exc}") from exc
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise ToolsError(f"{BUILD_SCRIPT} printed no bin dir")
    bin_dir = Path(lines[-1])
    missing = [b for b in BINARIES if not (bin_dir / b).is_file()]
    if missing:
        raise ToolsError(f"{bin_dir} lacks {', '.join(missing)}")
    return bin_dir
