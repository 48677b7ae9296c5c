"""examples/: each file says what `kubectl create` prints for it (checked against the real API
server by tests/e2e/test_examples.py); offline `check` agrees; the seed copies stay the seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from dev.tools import REPO_ROOT
from webhook.admission.dispatch import Policy
from webhook.catalog import load_catalog
from webhook.manifests import read_objects
from webhook.offline import admit
from webhook.policy.decide import Options

EXAMPLES = sorted((REPO_ROOT / "examples").rglob("*.yaml"))
SEEDS = REPO_ROOT / "tests" / "seeds"
SAYS = "# kubectl create says: "
DENIED = 'admission webhook "validate.tpu-webhook.io" denied the request: '
POLICY = Policy(load_catalog(None), Options())
#: API groups the API server serves without an operator's CRDs.
BUILT_IN_GROUPS = frozenset({"", "apps", "batch"})


def says(example: Path) -> str:
    (line,) = [line for line in example.read_text().splitlines() if line.startswith(SAYS)]
    return line.removeprefix(SAYS)


def owner_groups(example: Path) -> set[str]:
    """The API groups of the example's objects that an operator's CRDs define."""
    groups = {str(obj["apiVersion"]).rpartition("/")[0] for _, obj in read_objects(str(example))}
    return groups - BUILT_IN_GROUPS


def test_there_are_correct_and_broken_examples() -> None:
    assert len([p for p in EXAMPLES if p.parent.name == "broken"]) >= 4
    assert len([p for p in EXAMPLES if p.parent.name == "examples"]) >= 3


@pytest.mark.parametrize("group", ["jobset.x-k8s.io", "leaderworkerset.x-k8s.io", "ray.io"])
def test_each_owner_kind_has_a_correct_and_a_broken_example(group: str) -> None:
    assert {p.parent.name for p in EXAMPLES if group in owner_groups(p)} == {"examples", "broken"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_each_example_says_in_one_comment_line_what_kubectl_create_prints(example: Path) -> None:
    header = example.read_text().split("\napiVersion:")[0].splitlines()
    assert all(line.startswith("#") for line in header)
    assert [line for line in header if line.startswith(SAYS)] == [SAYS + says(example)]


def offline_lines(example: Path) -> list[str]:
    """The lines `kubectl create -f examples/...` prints, as offline `check` predicts them."""
    typed = example.relative_to(REPO_ROOT)
    lines = []
    for _, obj in read_objects(str(example)):
        r = admit(obj, POLICY)
        lines += [f"Warning: {v.message}" for v in r.warnings]
        group = str(obj["apiVersion"]).rpartition("/")[0]
        resource = r.kind.lower() + (f".{group}" if group else "")
        messages = [v.message for v in r.denials]
        shown = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
        lines.append(
            f'Error from server (Forbidden): error when creating "{typed}": {DENIED}{shown}'
            if messages
            else f"{resource}/{r.name} created"
        )
    return lines


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_offline_check_predicts_the_line_the_comment_shows(example: Path) -> None:
    assert says(example) in offline_lines(example)


@pytest.mark.parametrize("seed", sorted(SEEDS.glob("*.yaml")), ids=lambda p: p.name)
def test_each_seed_is_an_example_with_its_comment_added(seed: Path) -> None:
    example = REPO_ROOT / "examples" / seed.name
    without = [line for line in example.read_text().splitlines() if not line.startswith(SAYS)]
    assert without == seed.read_text().splitlines()
