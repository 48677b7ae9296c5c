"""Every file in examples/ through `kubectl create`, as the README tells a user to type it.

Each example's comment line `# kubectl create says: ...` is a line kubectl prints for it, so the
comment cannot drift from the product. A new example is a new file; nothing to add here. The
JobSet, LeaderWorkerSet and RayCluster examples run with the real operators (`operators`: their
CRDs, their controllers, and JobSet's and LWS's own webhooks, which see each object before and
beside tpu-webhook), so the line is the one a cluster with those operators prints.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dev.controlplane import ControlPlane
from dev.operators import Operators
from dev.tools import REPO_ROOT
from tests.unit.test_examples import EXAMPLES, owner_groups, says

pytestmark = pytest.mark.e2e

BUILT_IN = [p for p in EXAMPLES if not owner_groups(p)]
OWNERS = [p for p in EXAMPLES if owner_groups(p)]


def kubectl_create(control_plane: ControlPlane, namespace: str, example: Path) -> None:
    typed = str(example.relative_to(REPO_ROOT))  # the path in kubectl's error, as typed
    result = subprocess.run(
        [str(control_plane.bin_dir / "kubectl"), "create", "-n", namespace, "-f", typed],
        cwd=REPO_ROOT,
        env=control_plane.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    printed = result.stdout.splitlines() + result.stderr.splitlines()
    assert says(example) in printed
    assert result.returncode == (1 if says(example).startswith("Error from server") else 0)


@pytest.mark.parametrize("example", BUILT_IN, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_kubectl_create_says_what_the_example_says(
    control_plane: ControlPlane, namespace: str, example: Path
) -> None:
    kubectl_create(control_plane, namespace, example)


@pytest.mark.parametrize("example", OWNERS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_kubectl_create_says_what_the_owner_example_says_with_its_operator_running(
    control_plane: ControlPlane, operators: Operators, namespace: str, example: Path
) -> None:
    kubectl_create(control_plane, namespace, example)
