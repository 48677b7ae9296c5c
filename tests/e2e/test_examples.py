"""Every file in examples/ through `kubectl create`, as the README tells a user to type it.

Each example's comment line `# kubectl create says: ...` is a line kubectl prints for it, so the
comment cannot drift from the product. A new example is a new file; nothing to add here (a kind
whose CRD the control plane lacks needs its operator installed by the suite first).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dev.controlplane import REPO_ROOT, ControlPlane
from tests.unit.test_examples import EXAMPLES, says

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_kubectl_create_says_what_the_example_says(
    control_plane: ControlPlane, namespace: str, example: Path
) -> None:
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
