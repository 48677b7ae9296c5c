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
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import FrameType

from dev.chart import ChartError, url_mode_configurations, wait_until_live
from dev.controlplane import ControlPlane, ControlPlaneError
from dev.operator_builds import OperatorBuild, OperatorError
from dev.operator_crds import install_crds
from dev.operators import Operators
from dev.processes import child_setup, free_port, stop_process
from dev.run_builds import BUILD_STOP_SECONDS, RunError, build_operators, build_tools, find_crds
from dev.run_walkthrough import print_walkthrough, say
from webhook.certificates.create import make_ca, make_serving_cert, write_pair


class Stopped(Exception):
    """SIGTERM, handled like Ctrl-C."""


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
