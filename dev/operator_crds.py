"""The operators' CRDs without a build (`make run`'s default): a cached build's ``crds/`` of the
pinned version, else the module zip from the Go module proxy; installed by server-side apply and
waited for until Established. Usage::

    with ControlPlane() as cp:  # the kinds only: objects are stored, nothing acts on them
        install_crds(cp, crd_dirs().values(), time.monotonic() + 120)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from dev.controlplane import ControlPlane
from dev.operator_builds import NAMES, OPERATORS_DIR, OperatorError, cache_root, pinned_module

#: Where each module keeps its CRDs (build.sh's crd_dir; a test compares the two sources).
CRD_PATHS = {
    "jobset": "config/components/crd/bases",
    "lws": "config/crd/bases",
    "kuberay": "config/crd/bases",
    "trainer": "manifests/base/crds",
}
#: The kustomization that sits beside the CRDs in Trainer's folder: not a manifest to apply.
KUSTOMIZATION = "kustomization.yaml"
FIELD_MANAGER = "tpu-webhook-e2e"


def cached_crds(name: str) -> Path | None:
    """``crds/`` of a finished build of the pinned version (any build key: the CRDs are the
    module zip's), or None."""
    _, version = pinned_module(name)
    done = [
        d / "crds"
        for d in sorted(cache_root().glob(f"{name}-{version}-*"))
        if (d / "build-info").is_file() and any((d / "crds").glob("*.yaml"))
    ]
    return done[-1] if done else None


def module_crds(name: str) -> Path:
    """The CRD folder inside the pinned module, downloaded (module zip only, no dependencies,
    no build) by `go mod download -json` into the Go module cache if not already there."""
    module, version = pinned_module(name)
    if shutil.which("go") is None:
        raise OperatorError(f"Go is not installed to download {module}@{version}")
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    try:
        proc = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            cwd=OPERATORS_DIR / name,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OperatorError(f"go mod download {module}@{version}: {exc}") from exc
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        info = {}
    if proc.returncode != 0 or info.get("Error") or not info.get("Dir"):
        problem = info.get("Error") or proc.stderr.strip() or f"exit {proc.returncode}"
        raise OperatorError(f"go mod download {module}@{version}: {problem}")
    crds = Path(info["Dir"]) / CRD_PATHS[name]
    if not crd_files([crds]):
        raise OperatorError(f"{module}@{version} has no CRDs in {CRD_PATHS[name]}")
    return crds


def crd_dirs(
    names: Sequence[str] = NAMES, on_download: Callable[[str, str], None] | None = None
) -> dict[str, Path]:
    """Each operator's CRD folder: its cached build's, else its module's (downloaded when
    missing; ``on_download(module, version)`` is called first, to show progress)."""
    found: dict[str, Path] = {}
    for name in names:
        cached = cached_crds(name)
        if cached is None and on_download is not None:
            on_download(*pinned_module(name))
        found[name] = cached or module_crds(name)
    return found


def crd_files(dirs: Iterable[Path]) -> list[Path]:
    """The CRD manifests of each folder (``*.yaml`` but a kustomization, as build.sh copies
    them)."""
    return [f for d in dirs for f in sorted(d.glob("*.yaml")) if f.name != KUSTOMIZATION]


def install_crds(control_plane: ControlPlane, dirs: Iterable[Path], deadline: float) -> None:
    """Server-side apply the CRDs (too large for client-side apply's last-applied
    annotation), then wait until they are Established."""
    files = [arg for f in crd_files(dirs) for arg in ("-f", str(f))]
    ssa = ["apply", "--server-side", f"--field-manager={FIELD_MANAGER}"]
    control_plane.kubectl(*ssa, *files, check=True, timeout=120)
    while True:
        remaining = max(1, int(deadline - time.monotonic()))
        wait = ["wait", "--for=condition=Established", f"--timeout={remaining}s", *files]
        result = control_plane.kubectl(*wait, timeout=remaining + 30)
        # A CRD the API server has not given conditions yet fails `kubectl wait` at once
        # (".status.conditions accessor error"): ask again.
        if result.returncode == 0 or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if result.returncode != 0:
        raise OperatorError(f"CRDs not Established: {result.stderr.strip()}")
