"""The node's own images, without a registry: one-layer archives of tiny static programs.

`pause` (containerd's sandbox_image) and `printenv` (the seed Job's stand-in workload) are Go
programs using only the standard library (tests/support/nodeimages), built with the local Go
toolchain and written as docker-archives that `ctr images import` reads.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from hashlib import sha256
from pathlib import Path

NODE_IMAGES_SRC = Path(__file__).resolve().parent / "nodeimages"


def build_node_programs(out: Path) -> dict[str, Path]:
    """`pause` and `printenv` as static binaries (Go, standard library only)."""
    env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-mod=mod")
    built = {}
    for name in ("pause", "printenv"):
        target = out / name
        subprocess.run(
            ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(target), f"./{name}"],
            cwd=NODE_IMAGES_SRC,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        built[name] = target
    return built


def write_image_archive(binary: Path, ref: str, archive: Path, user: str = "65535") -> Path:
    """A docker-archive (`docker save` layout) with one layer holding `/<binary name>`."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tar.gettarinfo(str(binary), arcname=binary.name)
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        info.mode = 0o755
        with binary.open("rb") as f:
            tar.addfile(info, f)
    layer_bytes = layer.getvalue()
    diff_id = sha256(layer_bytes).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": [f"/{binary.name}"], "User": user, "Env": ["PATH=/"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created_by": f"tests/support/node.py: /{binary.name}"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [ref], "Layers": [f"{diff_id}/layer.tar"]}]
    with tarfile.open(archive, mode="w") as tar:
        for name, data in (
            (f"{diff_id}/layer.tar", layer_bytes),
            (config_name, config_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive
