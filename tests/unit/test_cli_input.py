"""The CLI on hostile and odd input: what kubectl refuses is exit 2 with one line, quickly and in
bounded memory; no input at all ends in a traceback."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.manifest_cases import CASES, HEAD
from webhook.cli import main

SEEDS = Path(__file__).resolve().parents[1] / "seeds"
MEMORY_LIMIT = 1024 * 1024 * 1024  # the child fails with MemoryError (exit 3) past this
GUARD_SECONDS = 30  # a guard against hangs, not a speed target: each run takes about 1 s


def bomb() -> str:
    return next(c.text for c in CASES if c.name == "an alias bomb")


HOSTILE = {
    "alias-bomb": (bomb(), "document contains excessive aliasing"),
    "nesting-10000": (HEAD + "x: " + "[" * 10_000 + "]" * 10_000 + "\n", "exceeded max depth"),
    "nesting-10000-maps": (HEAD + "x: " + "{a: " * 10_000 + "}" * 10_000, "exceeded max depth"),
    "nesting-block-10000": (HEAD + "x:\n" + "- " * 10_000 + "a\n", "exceeded max depth"),
    "object-over-3-MiB": (
        HEAD + "data:\n  k: " + "x" * (3 * 1024 * 1024 + 1) + "\n",
        "larger than the 3 MiB the API server accepts",
    ),
}


def _limit_memory() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


@pytest.mark.parametrize("command", ["check", "render"])
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_input_exits_2_with_one_line_naming_the_file_and_the_problem(
    tmp_path: Path, name: str, command: str
) -> None:
    text, problem = HOSTILE[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", command, "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=GUARD_SECONDS,
        preexec_fn=_limit_memory,
        check=False,
    )
    elapsed = time.monotonic() - began
    assert (proc.returncode, proc.stdout) == (2, ""), f"{elapsed:.1f} s: {proc.stderr}"
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: {path}: ")
    assert problem in line


# --------------------------------------------------------------------------- property

TOKENS = [
    *("\n", " ", "  ", "\t", "- ", ": ", ":", ",", "#", "---\n", "...\n", "? ", "|", ">", "'"),
    *('"', "[", "]", "{", "}", "&a ", "*a", "&b ", "*b", "<<: ", "!!str ", "!x ", "~", "%"),
    *("yes", "0x1F", "010", "1e3", ".inf", "-", "\\u00e9", "\r\n", "\ufeff", "\x00", "\x85"),
    *("apiVersion: v1\n", "kind: Pod\n", "kind: List\nitems:\n", "kind: Job\n", "metadata:"),
    *("spec:", "containers:", "nodeSelector:", "cloud.google.com/gke-tpu-accelerator",
      "cloud.google.com/gke-tpu-topology", "tpu-v5-lite-podslice", "2x4", "google.com/tpu",
      "resources:", "limits:", "requests:", "parallelism:", "completions:", "template:", "4"),
]  # fmt: skip
SEED_TEXTS = [p.read_text() for p in sorted(SEEDS.glob("*.yaml"))]
yaml_like = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)


@st.composite
def mutated_seed(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEED_TEXTS))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 8))
        text = text[:at] + draw(st.sampled_from(TOKENS)) + text[at + cut :]
    return text


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.one_of(
        st.binary(max_size=600),
        yaml_like.map(str.encode),
        mutated_seed().map(lambda t: t.encode("utf-8", "surrogatepass")),
    ),
    command=st.sampled_from(["check", "render"]),
)
def test_no_input_ends_in_a_traceback(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, command: str
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "input.yaml"
    path.write_bytes(data)
    with pytest.MonkeyPatch.context() as patch:
        out, err = _Capture(), _Capture()
        patch.setattr("sys.stdout", out)
        patch.setattr("sys.stderr", err)
        code = main([command, "-f", str(path)])
    assert code in (0, 1, 2), err.text
    *notes, last = err.text.splitlines() or [""]
    assert all(n.startswith((f"warning: {path}: ", "# ")) for n in notes), err.text
    assert last.startswith(f"error: {path}: ") if code == 2 else True, err.text
    assert "Traceback" not in err.text


class _Capture:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass
