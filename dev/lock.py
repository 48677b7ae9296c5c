"""The image's lock files: what docker/install.sh installs, every file by its sha256.

    python -m dev.lock        # make lock: resolve again and rewrite both files

- docker/requirements.lock: the runtime dependencies of pyproject.toml (not the dev extra), with
  every transitive dependency, for CPython 3.11 on Linux. The image's venv installs exactly these,
  hash-checked, wheels only, without resolving (`pip install --require-hashes --no-deps`).
- docker/build-requirements.lock: the builder stage's throw-away environment: the build backend
  of pyproject.toml's [build-system] and the SBOM generator (the dev extra's cyclonedx-bom pin).
  None of it reaches the image.

`uv pip compile` resolves each for x86_64 and for aarch64 (manylinux, glibc 2.36 as Debian
bookworm), wheels only; the two resolutions must be the same file, so one lock serves both
architectures. Each entry carries the hash of every file PyPI lists for that version. The parser
below is what tests/unit/test_lock.py checks the files with (no network).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = REPO_ROOT / "pyproject.toml"
RUNTIME_LOCK = REPO_ROOT / "docker" / "requirements.lock"
BUILD_LOCK = REPO_ROOT / "docker" / "build-requirements.lock"
PYTHON_VERSION = "3.11"
PLATFORMS = ("x86_64-manylinux_2_36", "aarch64-manylinux_2_36")
SBOM_TOOL = "cyclonedx-bom"
PROJECT_VIA = "tpu-webhook (pyproject.toml)"

_ENTRY = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+?)"  # name==version
    r"(?:\s*;\s*(?P<marker>[^\\]+?))?\s*\\?$"  # ; marker, and the continuation
)
_HASH = re.compile(r"^\s+--hash=sha256:(?P<digest>[0-9a-f]{64})\s*\\?$")
_VIA_ONE = re.compile(r"^\s+# via (?P<who>.+)$")
_VIA_MANY = re.compile(r"^\s+#   (?P<who>.+)$")


class LockError(RuntimeError):
    """A lock file that cannot be read, or resolutions that disagree."""


@dataclass(frozen=True)
class Pin:
    name: str  # canonical (PEP 503)
    version: str
    marker: str | None
    hashes: tuple[str, ...]
    via: tuple[str, ...]  # who requires it, as uv annotates: package names or PROJECT_VIA


def parse_lock(text: str) -> list[Pin]:
    """The entries of a `uv pip compile --generate-hashes` file; anything else is an error."""
    pins: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if (entry := _ENTRY.match(line)) is not None:
            pins.append({**entry.groupdict(), "hashes": [], "via": []})
        elif (digest := _HASH.match(line)) is not None and pins:
            pins[-1]["hashes"].append(digest["digest"])
        elif line.lstrip().startswith("#"):  # uv's header, and who requires each entry
            via = _VIA_ONE.match(line) or _VIA_MANY.match(line)
            if via is not None and pins:
                pins[-1]["via"].append(via["who"].strip())
        elif line.strip():
            raise LockError(f"line {number}: not a pinned, hashed requirement: {line!r}")
    return [
        Pin(
            name=canonicalize_name(p["name"]),
            version=p["version"],
            marker=p["marker"].strip() if p["marker"] else None,
            hashes=tuple(p["hashes"]),
            via=tuple(p["via"]),
        )
        for p in pins
    ]


def exact_pins(requirements: Iterable[str]) -> dict[str, str]:
    """{canonical name: version} of `name[extras]==version` requirements; others are errors."""
    pins: dict[str, str] = {}
    for text in requirements:
        req = Requirement(text)
        (spec,) = req.specifier  # exactly one specifier
        if spec.operator != "==" or "*" in spec.version:
            raise LockError(f"{text!r}: not pinned with ==")
        pins[canonicalize_name(req.name)] = spec.version
    return pins


def pyproject() -> Mapping[str, Any]:
    return tomllib.loads(PYPROJECT.read_text())


def runtime_pins(project: Mapping[str, Any]) -> dict[str, str]:
    """pyproject.toml's [project] dependencies: what the image installs besides itself."""
    return exact_pins(project["project"]["dependencies"])


def build_requirements(project: Mapping[str, Any]) -> list[str]:
    """The builder's throw-away environment: the build backend and the dev extra's SBOM tool."""
    dev = project["project"]["optional-dependencies"]["dev"]
    tool = [r for r in dev if canonicalize_name(Requirement(r).name) == SBOM_TOOL]
    if len(tool) != 1:
        raise LockError(f"the dev extra pins {SBOM_TOOL} {len(tool)} times, not once")
    return [*project["build-system"]["requires"], *tool]


def compile_lock(source: Sequence[str], stdin: str | None, platform: str) -> str:
    """One `uv pip compile` of `source` (a file, or "-" with `stdin`) for one platform."""
    uv = Path(sys.executable).with_name("uv")
    command = [
        str(uv), "pip", "compile", *source, "--quiet",
        "--python-version", PYTHON_VERSION, "--python-platform", platform,
        "--only-binary", ":all:", "--generate-hashes",
        "--custom-compile-command", "make lock",
    ]  # fmt: skip
    proc = subprocess.run(
        command, cwd=REPO_ROOT, input=stdin, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise LockError(f"uv pip compile for {platform} failed:\n{proc.stderr}")
    return proc.stdout


def resolve(source: Sequence[str], stdin: str | None = None) -> str:
    """The lock for every platform of PLATFORMS, which must resolve alike."""
    first, *others = (compile_lock(source, stdin, platform) for platform in PLATFORMS)
    for platform, text in zip(PLATFORMS[1:], others, strict=True):
        if text != first:
            raise LockError(f"{PLATFORMS[0]} and {platform} resolve differently")
    return first


def main() -> int:
    project = pyproject()
    locks = {
        RUNTIME_LOCK: resolve(["pyproject.toml"]),
        BUILD_LOCK: resolve(["-"], "\n".join(build_requirements(project)) + "\n"),
    }
    for path, text in locks.items():
        pins = parse_lock(text)
        path.write_text(text)
        print(f"{path.relative_to(REPO_ROOT)}: {len(pins)} packages")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
