"""`make run`: tpu-webhook doing its main job on this machine.

Builds (once, cached) and starts the control plane the e2e suite uses (dev/controlplane.py: etcd,
kube-apiserver, kube-controller-manager v1.35.4 from Go modules), starts `tpu-webhook serve` with
a throw-away CA, registers it exactly as the chart does in url mode (dev/chart.py, the real helm),
waits until the API server calls it, and prints what to type in another shell. The CRDs of
JobSet, LeaderWorkerSet, KubeRay and Kubeflow Trainer are installed so that every example can be
created (from the operator builds when cached, else from their module zips; dev/operator_crds.py);
`--operators` also builds (once, cached) and starts the operators themselves. Ctrl-C (or SIGTERM)
stops the webhook, the operators, then the control plane, and removes their temporary directory;
an interrupted build removes its own. Without Go and without built tools, it says so and runs the
webhook alone (`tpu-webhook serve`, development certificates in certs/), as before.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import FrameType

from dev.chart import ChartError, url_mode_configurations, wait_until_live
from dev.controlplane import ControlPlane, ControlPlaneError
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
from dev.operator_crds import crd_dirs, install_crds
from dev.operators import Operators
from dev.processes import child_setup, free_port, stop_process
from dev.tools import BUILD_SCRIPT, REPO_ROOT
from webhook.certificates.create import make_ca, make_serving_cert, write_pair

STARTED = time.monotonic()
EXAMPLES = REPO_ROOT / "examples"
SAYS = "# kubectl create says: "
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
OWNER_KINDS = (
    "JobSet, LeaderWorkerSet, KubeRay (RayCluster, RayJob, RayService) and Kubeflow Trainer "
    "(TrainJob, TrainingRuntime, ClusterTrainingRuntime)"
)
JOBSET_EXAMPLE = "v6e-multislice"  # examples/v6e-4x4-multislice-jobset.yaml


class Stopped(Exception):
    """SIGTERM, handled like Ctrl-C."""


class RunError(RuntimeError):
    """Something `make run` needs failed; the message says what."""


def say(text: str = "") -> None:
    print(text, flush=True)  # noqa: T201 - this is a terminal program


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="webhook port (default 8443 if free)")
    parser.add_argument(
        "--operators",
        action="store_true",
        help="also run the JobSet, LeaderWorkerSet, KubeRay and Kubeflow Trainer operators "
        "(built once, cached)",
    )
    args = parser.parse_args(argv)
    port = args.port or (8443 if _port_free(8443) else free_port())

    def stop(signum: int, _frame: FrameType | None) -> None:
        for name in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the cleanup
            signal.signal(name, signal.SIG_IGN)
        raise KeyboardInterrupt if signum == signal.SIGINT else Stopped

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        bin_dir = build_tools()
        if bin_dir is None:
            return run_webhook_alone(port)
        builds = build_operators() if args.operators else None
        crds = None if builds else find_crds()
        with ControlPlane(bin_dir) as control_plane, contextlib.ExitStack() as cleanup:
            say(f"Control plane ready in {control_plane.start_seconds:.1f} s.")
            operators = start_operators(control_plane, cleanup, builds) if builds else None
            crds_installed = install_in_background(control_plane, cleanup, crds or [])
            webhook = start_webhook(control_plane, port)
            cleanup.callback(stop_process, webhook, BUILD_STOP_SECONDS)
            register(control_plane, bin_dir, port)
            crds_installed.result()
            print_walkthrough(control_plane, bin_dir, port, operators, bool(crds))
            watch(control_plane, webhook, operators)
        return 0
    except (KeyboardInterrupt, Stopped):
        say("\nStopped: no process of this run is left, and its temporary files are removed.")
        return 0
    except (
        RunError,
        ControlPlaneError,
        ChartError,
        OperatorError,
        subprocess.CalledProcessError,
    ) as error:
        say(f"make run: {error}")
        return 1


# ----------------------------------------------------------------------------- tools


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


def start_operators(
    control_plane: ControlPlane, cleanup: contextlib.ExitStack, builds: dict[str, OperatorBuild]
) -> Operators:
    """The operators (their CRDs, managers and webhooks), stopped by `cleanup`."""
    operators = cleanup.enter_context(Operators(control_plane, builds))
    say(f"Operators running in {operators.start_seconds:.1f} s (CRDs, managers, webhooks).")
    return operators


def install_in_background(
    control_plane: ControlPlane, cleanup: contextlib.ExitStack, crds: list[Path]
) -> Future[None]:
    """The CRDs installed while the webhook starts (the API server takes seconds to take in
    5 MB of schemas and serve them); the future's result says when they are Established."""
    began = time.monotonic()

    def install() -> None:
        if crds:
            install_crds(control_plane, crds, began + 120)
            say(f"CRDs installed and served in {time.monotonic() - began:.1f} s.")

    return cleanup.enter_context(ThreadPoolExecutor(1)).submit(install)


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


# Go's compilers stop at once on SIGINT; on two busy cores that can still take tens of seconds.
BUILD_STOP_SECONDS = 120


# ----------------------------------------------------------------------------- webhook


def start_webhook(control_plane: ControlPlane, port: int) -> subprocess.Popen[bytes]:
    """`tpu-webhook serve` on 127.0.0.1:port with a CA made for this run (in the temp dir)."""
    certs = control_plane.workdir / "webhook-certs"
    ca = make_ca("tpu-webhook-make-run-ca", days=7)
    write_pair(certs, ca, make_serving_cert(ca, ["localhost"], ["127.0.0.1"], days=7))
    say(f"Starting tpu-webhook on https://127.0.0.1:{port} ...")
    serve = ["serve", "--port", str(port), "--log-level", "warning"]
    files = ["--tls-cert-file", str(certs / "tls.crt"), "--tls-key-file", str(certs / "tls.key")]
    process = subprocess.Popen(
        [sys.executable, "-m", "webhook", *serve, *files],
        stdin=subprocess.DEVNULL,
        preexec_fn=child_setup,  # its own process group; killed if we are
    )
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RunError(f"tpu-webhook serve exited with {process.returncode}")
        with contextlib.suppress(OSError):
            url = f"https://127.0.0.1:{port}/readyz"
            with urllib.request.urlopen(url, context=context, timeout=2) as response:
                if response.status == 200:
                    return process
        time.sleep(0.1)
    stop_process(process, BUILD_STOP_SECONDS)
    raise RunError("tpu-webhook serve was not ready within 30 s")


def register(control_plane: ControlPlane, bin_dir: Path, port: int) -> None:
    """The chart's url-mode configurations (helm template), applied; then wait until live."""
    ca_pem = (control_plane.workdir / "webhook-certs" / "ca.crt").read_bytes()
    url = f"https://127.0.0.1:{port}"
    configurations = url_mode_configurations(url, ca_pem, helm=bin_dir / "helm")
    manifest = "\n".join(json.dumps(c) for c in configurations)
    control_plane.kubectl("apply", "-f", "-", input=manifest, check=True)
    if not wait_until_live(control_plane):  # configurations go live asynchronously
        raise RunError("the API server never called the webhook (60 s)")


# ----------------------------------------------------------------------------- talk


def print_walkthrough(
    control_plane: ControlPlane,
    bin_dir: Path,
    port: int,
    operators: Operators | None,
    crds: bool,
) -> None:
    broken = sorted(EXAMPLES.glob("broken/*.yaml"))
    correct = sorted(EXAMPLES.glob("*.yaml"))
    if operators:
        owners = textwrap.fill(f"The operators of {OWNER_KINDS} run too.", 96) + "\n"
    elif crds:
        owners = (
            textwrap.fill(
                f"{OWNER_KINDS} objects are stored (their CRDs are installed) but no operator "
                "acts on them: make run RUN_ARGS=--operators runs them.",
                96,
            )
            + "\n"
        )
    else:
        owners = ""
    say(
        f"\ntpu-webhook is live: Kubernetes {control_plane.version} on this machine calls it at "
        f"https://127.0.0.1:{port},\nregistered as the chart registers it (url mode). There are "
        f"no nodes, so Pods stay Pending.\n{owners}\nIn another shell:\n"
    )
    say(f"  cd {REPO_ROOT}")
    say(f"  export KUBECONFIG={control_plane.kubeconfig}")
    say(f"  export PATH={bin_dir}:$PATH   # kubectl {control_plane.version}\n")
    for example in broken + correct:
        say(f"  kubectl create -f {example.relative_to(REPO_ROOT)}")
        says = next((line for line in _comments(example) if line.startswith(SAYS)), "")
        if says:
            say("      # " + _shorten(_gist(says.removeprefix(SAYS)), 100))
    env = "{.spec.template.spec.containers[0].env}"
    say(f"\n  kubectl get job tpu-available-chips -o jsonpath='{env}'   # what the webhook added")
    if operators:
        job = f"{JOBSET_EXAMPLE}-slice-0"
        say(f"  kubectl get job {job} -o jsonpath='{env}'   # the JobSet's Job of slice 0")
    stops = "the webhook, the operators" if operators else "the webhook"
    say(
        f"\nReady in {time.monotonic() - STARTED:.0f} s. Ctrl-C stops {stops} and the control "
        f"plane and removes {control_plane.workdir}."
    )


def _comments(path: Path) -> Iterator[str]:
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            return
        yield line


def _gist(line: str) -> str:
    """`denied: <message>` for kubectl's long denial line; other lines as they are."""
    _, denied, message = line.partition(" denied the request: ")
    return f"denied: {message}" if denied else line


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def watch(
    control_plane: ControlPlane, webhook: subprocess.Popen[bytes], operators: Operators | None
) -> None:
    """Until Ctrl-C; a process that dies ends the run with its name."""
    while True:
        if webhook.poll() is not None:
            raise RunError(f"tpu-webhook serve exited with {webhook.returncode}")
        if operators:
            operators.check_alive()
        if not control_plane.running:
            raise RunError(f"the control plane stopped; logs were in {control_plane.log_dir}")
        time.sleep(0.5)


def run_webhook_alone(port: int) -> int:
    """As `make run` was: the webhook with development certificates, printing configurations."""
    os.execv(sys.executable, [sys.executable, "-m", "webhook", "serve", "--port", str(port)])


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


if __name__ == "__main__":
    raise SystemExit(main())
