"""What `make run` builds or finds before it starts anything, saying what each step costs: the
Kubernetes tools (tests/tools/build.sh), the operators (tests/tools/operators/build.sh) or only
their CRDs.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from dev.operator_builds import BUILD_SCRIPT as OPERATORS_BUILD_SCRIPT
from dev.operator_builds import (
    NAMES,
    TITLES,
    OperatorBuild,
    OperatorError,
    builds_from,
    cache_root,
    pinned_module,
)
from dev.operator_crds import crd_dirs
from dev.processes import stop_process
from dev.run_walkthrough import OWNER_KINDS, say
from dev.tools import BUILD_SCRIPT, REPO_ROOT

# A first build on 2 otherwise idle cores with empty Go module and build caches (a cold
# `.ci/run`, 2026-12-01): modules 12 s, etcd 66 s, kube-apiserver 224 s, kube-controller-manager
# 61 s, kubectl 21 s, helm 11 s (and 23 s for the kubelet and scheduler `make run` does not need).
EXPECTED_SECONDS = {
    "modules": 15,
    "etcd": 65,
    "kube-apiserver": 225,
    "kube-controller-manager": 60,
    "kubectl": 20,
    "helm": 10,
}
# Each operator's build in the same cold run, after the tools: jobset 93 s, lws 91 s, kuberay 79 s;
# trainer (added later) 230 s with an empty Go build cache on 2 cores shared with other builds.
EXPECTED_OPERATOR_SECONDS = {"jobset": 95, "lws": 90, "kuberay": 80, "trainer": 230}
# Go's compilers stop at once on SIGINT; on two busy cores that can still take tens of seconds.
BUILD_STOP_SECONDS = 120


class RunError(RuntimeError):
    """Something `make run` needs failed; the message says what."""


def build_tools() -> Path | None:
    """The tools' bin dir, built on first use with progress; None: no Go and nothing built."""
    have_go = shutil.which("go") is not None
    say("Local Kubernetes tools (etcd, kube-apiserver, kube-controller-manager, kubectl, helm):")
    code, stdout, output = _build(["bash", str(BUILD_SCRIPT)], _progress)
    bin_dir = stdout.strip().splitlines()
    if code == 0 and bin_dir:
        say(f"  found in {bin_dir[-1]}")
        return Path(bin_dir[-1])
    if not have_go:
        say(
            "  Go is not installed, and the tools were never built here. Go 1.24+ builds them "
            "once from the Go module proxy (https://go.dev/doc/install).\n"
            "  Running the webhook alone instead, as `tpu-webhook serve`."
        )
        return None
    tail = "\n".join(line for line in output if line)[-2000:]
    raise RunError(f"{BUILD_SCRIPT.relative_to(REPO_ROOT)} failed:\n{tail}")


def _build(command: list[str], progress: Callable[[str], str]) -> tuple[int, str, list[str]]:
    """Run a build script: each stderr line through `progress`; (exit code, stdout, lines)."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # Ctrl-C reaches it through us, so we can wait for its cleanup
    )
    try:
        assert process.stderr is not None
        assert process.stdout is not None
        output = [progress(line.rstrip("\n")) for line in process.stderr]
        stdout = process.stdout.read()
        code = process.wait()
    except BaseException:
        # Ctrl-C for the build: bash and go stop; build.sh's EXIT trap removes its temp dir (not
        # if it has to be killed after BUILD_STOP_SECONDS)
        stop_process(process, BUILD_STOP_SECONDS, signal.SIGINT)
        raise
    return code, stdout, output


def _progress(line: str) -> str:
    words = line.removeprefix("build.sh: ").split()
    if line.startswith("build.sh: downloading modules"):
        say(
            "  first run: building them from the Go module proxy into ~/.cache/tpu-webhook/tools "
            "(about 6-7 minutes on 2 idle cores, longer on a busy machine; 730 MB of modules, "
            "3 GB of Go build cache; later runs start in seconds)"
        )
        say(f"  downloading Go modules (about {EXPECTED_SECONDS['modules']} s) ...")
    elif line.startswith("build.sh: building "):
        expected = EXPECTED_SECONDS.get(words[1])
        about = f" (about {expected} s on 2 idle cores)" if expected else ""
        say(f"  building {words[1]}{about} ...")
    elif line.startswith("build.sh: built ") or line.startswith("build.sh: tools ready"):
        say("  " + line.removeprefix("build.sh: "))
    elif line and not line.startswith("build.sh: "):
        say("    " + line)  # go's own messages, e.g. a download error
    return line


def find_crds() -> list[Path]:
    """The owner kinds' CRD folders (a cached operator build's, else the module zip's, which
    is downloaded on first use: no build); none, with the reason, if they cannot be had."""
    say(f"CRDs of {OWNER_KINDS}:")

    def downloading(module: str, version: str) -> None:
        size = "19 MB" if module.startswith("github.com/kubeflow/") else "about 1 MB"
        say(f"  downloading {module}@{version} (module zip, {size}; no build) ...")

    try:
        dirs = crd_dirs(on_download=downloading)
    except OperatorError as error:
        say(f"  not available: {error}\n  Their examples will say the kind is unknown.")
        return []
    by_source: dict[str, list[str]] = {}
    for name, crds in dirs.items():
        built = crds.parent.parent == cache_root()
        source = f"the operator builds in {cache_root()}" if built else "the Go module cache"
        by_source.setdefault(source, []).append(f"{TITLES[name]} {pinned_module(name)[1]}")
    for source, versions in by_source.items():
        say(f"  {', '.join(versions)}: from {source}")
    return list(dirs.values())


def build_operators() -> dict[str, OperatorBuild]:
    """The operators' builds, made on first use with progress (build.sh; cached)."""
    say(f"Operators of {OWNER_KINDS}:")
    script = ["bash", str(OPERATORS_BUILD_SCRIPT), *NAMES]
    code, stdout, output = _build(script, OperatorProgress())
    if code != 0:
        tail = "\n".join(line for line in output if line)[-2000:]
        raise RunError(f"{OPERATORS_BUILD_SCRIPT.relative_to(REPO_ROOT)} failed:\n{tail}")
    builds = builds_from(NAMES, stdout)
    say(f"  found in {cache_root()}")
    return builds


class OperatorProgress:
    """operators/build.sh's stderr as progress lines (what a first build costs, said once)."""

    def __init__(self) -> None:
        self.first = True

    def __call__(self, line: str) -> str:
        words = line.removeprefix("operators/build.sh: ").split()
        name = words[0].rstrip(":") if words else ""
        if not line.startswith("operators/build.sh: "):
            if line:
                say("    " + line)  # go's own messages, e.g. a download error
        elif line.endswith(": downloading modules"):
            if self.first:
                self.first = False
                say(
                    f"  first run: building them from the Go module proxy into {cache_root()} "
                    "(about 1.5 minutes each on 2 idle cores, Kubeflow Trainer's nearer 4, plus "
                    "880 MB of modules to download; seconds once Go's build cache is warm; later "
                    "runs find them)"
                )
            say(f"  downloading the Go modules of {TITLES.get(name, name)} ...")
        elif len(words) >= 3 and words[1] == "building":
            about = f", about {EXPECTED_OPERATOR_SECONDS[name]} s cold" if name in TITLES else ""
            say(f"  building {words[2]}{about} ...")
        elif " built in " in line:
            say("  " + line.removeprefix("operators/build.sh: ").split(":")[0])
        return line
