"""The image built from the repository's Dockerfile by ``docker/build-local.sh`` (cached).

``built_image()`` runs the script once per process and returns what it built: the reference in
the local container storage (podman/buildah), a docker-archive that ``ctr images import`` reads
and the image's SBOM next to it. ``pod_run_args()`` turns the chart's rendered Deployment into
the ``podman run`` flags that run the container as the kubelet would (user, read-only root,
capabilities, mounts, env).
"""

from __future__ import annotations

import functools
import json
import resource
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "docker" / "build-local.sh"
BUILD_TIMEOUT_S = 30 * 60  # cold: a Debian root file system (~1 min) and a pip install


class ImageBuildError(RuntimeError):
    """docker/build-local.sh failed."""


@dataclass(frozen=True)
class BuiltImage:
    ref: str  # localhost/tpu-webhook:<version>-<inputs hash>
    repository: str
    tag: str
    archive: Path  # docker-archive of ref
    sbom: Path  # the CycloneDX SBOM copied out of the image, next to the archive
    sbom_in_image: str  # where the image carries it (its label io.tpu-webhook.sbom)
    size_bytes: int  # uncompressed, as the container storage reports it
    build_seconds: int  # of the build that made the cache entry (0 s when never rebuilt)
    base: str
    elapsed_seconds: float  # this process's call of the script (a cache hit: well under 1 s)


@functools.cache
def built_image() -> BuiltImage:
    began = time.monotonic()
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        raise ImageBuildError(f"{BUILD_SCRIPT} failed ({exc.returncode}):\n{exc.stderr}") from exc
    out = Path(proc.stdout.strip().splitlines()[-1])
    info = json.loads((out / "image.json").read_text())
    return BuiltImage(
        ref=info["ref"],
        repository=info["repository"],
        tag=info["tag"],
        archive=out / "image.tar",
        sbom=out / info["sbom"],
        sbom_in_image=info["sbom_in_image"],
        size_bytes=int(info["size_bytes"]),
        build_seconds=int(info["build_seconds"]),
        base=info["base"],
        elapsed_seconds=time.monotonic() - began,
    )


def machine_run_args() -> list[str]:
    """podman flags this machine needs, whatever the container.

    The VM's capability bounding set lacks CAP_SYS_RESOURCE, so no process may raise a hard
    rlimit: podman's default RLIMIT_NOFILE (1048576) fails with "setrlimit RLIMIT_NOFILE:
    Operation not permitted"; the container gets the limits this process has instead. crun
    refuses this machine's hybrid cgroup v1 layout ("cgroups in hybrid mode not supported"),
    runc runs it.
    """
    _, nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    _, nproc = resource.getrlimit(resource.RLIMIT_NPROC)
    nproc = min(nproc, 32768)
    return ["--runtime", "runc", "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit",
            f"nproc={nproc}:{nproc}"]  # fmt: skip


def pod_run_args(deployment: Mapping[str, Any], secret_dirs: Mapping[str, Path]) -> list[str]:
    """`podman run` flags for the Deployment's only container, as its Pod spec says.

    ``secret_dirs`` maps a Secret volume's secretName to a host folder holding its keys. Only
    what the chart uses is translated (Secret and emptyDir volumes, value env vars); anything
    else fails the translation, so a chart change cannot be silently ignored here.
    """
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    sc = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
    args = ["--user", f"{sc['runAsUser']}:{sc['runAsGroup']}"]
    if sc.get("readOnlyRootFilesystem"):
        args += ["--read-only", "--read-only-tmpfs=false"]  # podman adds tmpfs dirs otherwise
    args += [f"--cap-drop={c}" for c in sc.get("capabilities", {}).get("drop", [])]
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "secret" in volume:
            host = secret_dirs[volume["secret"]["secretName"]]
            args += ["--volume", f"{host}:{mount['mountPath']}:ro"]
        elif "emptyDir" in volume:
            size = volume["emptyDir"].get("sizeLimit", "64Mi").removesuffix("i").lower()
            args += ["--tmpfs", f"{mount['mountPath']}:rw,size={size},mode=1777"]
        else:
            raise ValueError(f"volume {mount['name']}: no translation for {volume}")
    for env in container.get("env", []):
        if "value" not in env:
            raise ValueError(f"env {env['name']}: only plain values are translated")
        args += ["--env", f"{env['name']}={env['value']}"]
    return args


def podman(*args: str, timeout: float = 60, check: bool = True) -> str:
    proc = subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: {proc.returncode}\n{proc.stderr}")
    return proc.stdout


def container_pid(name: str) -> int:
    return int(podman("inspect", "--format", "{{.State.Pid}}", name).strip())


def proc_ids(pid: int) -> tuple[Sequence[str], Sequence[str]]:
    """(real, effective, saved, fs) uids and gids of a host process, from /proc."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return fields["Uid"].split(), fields["Gid"].split()
