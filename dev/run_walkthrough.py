"""What `make run` says: the terminal lines, and the walkthrough printed once all is live (what
to type in another shell, and what each example's `kubectl create` answers).
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

from dev.controlplane import ControlPlane
from dev.operators import Operators
from dev.tools import REPO_ROOT

STARTED = time.monotonic()
EXAMPLES = REPO_ROOT / "examples"
SAYS = "# kubectl create says: "
OWNER_KINDS = (
    "JobSet, LeaderWorkerSet, KubeRay (RayCluster, RayJob, RayService) and Kubeflow Trainer "
    "(TrainJob, TrainingRuntime, ClusterTrainingRuntime)"
)
JOBSET_EXAMPLE = "v6e-multislice"  # examples/v6e-4x4-multislice-jobset.yaml


def say(text: str = "") -> None:
    print(text, flush=True)  # noqa: T201 - this is a terminal program


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
