"""`make run` as a user runs it: what it prints, the denial a second shell sees, and Ctrl-C.

With the owner kinds' CRDs only (the default) a JobSet is decided like any kind; with
`--operators` the JobSet controller makes its Jobs, which the webhook patches.

Ctrl-C is a real SIGINT sent to the process group `make run` leads, as a terminal sends it.
Afterwards no process of the run is left (none has its temp dir or build dir on its command
line) and its temporary directories are gone, after a run, in the middle of a first build, and
where Go is missing (the webhook alone).
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from dev.operator_builds import NAMES, operator_builds
from dev.operator_crds import crd_files, module_crds
from dev.processes import free_port
from dev.tools import REPO_ROOT, tools_dir
from tests.unit.test_examples import EXAMPLES, owner_groups, says

pytestmark = pytest.mark.e2e

BROKEN = "examples/broken/wrong-chip-count.yaml"
JOBSET = "examples/v6e-4x4-multislice-jobset.yaml"
OWNER_EXAMPLES = [p for p in EXAMPLES if owner_groups(p)]  # JobSet, LWS, RayCluster


def _as_a_terminal_starts_it() -> None:
    """Ctrl-C and Ctrl-\\ as a shell prompt leaves them: when the suite itself runs as a
    background job of a shell without job control (`cmd &` in a script), SIGINT and SIGQUIT
    arrive ignored, children inherit that, and no Ctrl-C would reach `make run`."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


class MakeRun:
    """`make run` in its own session (its own terminal, so to speak), output read by a thread."""

    def __init__(self, env: dict[str, str], args: str = "") -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.process = subprocess.Popen(
            ["make", "--no-print-directory", "run", f"RUN_ARGS={args}"],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=_as_a_terminal_starts_it,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, text: str, timeout: float) -> str:
        """The first line containing `text` (events, not sleeps)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r}; output so far:\n" + "\n".join(self.lines))

    def ctrl_c(self, timeout: float = 90) -> int:
        os.killpg(self.process.pid, signal.SIGINT)  # the whole foreground group, as a tty does
        code = self.process.wait(timeout=timeout)
        self.wait_for_end()
        return code

    def wait_for_end(self) -> None:
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@pytest.fixture
def make_run_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    return env


def processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline:
                found.append(f"{proc.name}: {cmdline[:200]}")
    return found


def test_make_run_serves_the_main_job_and_ctrl_c_leaves_nothing_behind(
    make_run_env: dict[str, str],
) -> None:
    tools_dir()  # built (or found) before the clock of this test starts
    port = free_port()
    run = MakeRun(make_run_env, f"--port={port}")
    try:
        export = run.wait_for("export KUBECONFIG=", timeout=120)
        path = run.wait_for("export PATH=", timeout=5)
        run.wait_for("Ctrl-C stops", timeout=5)
        workdir = Path(export.split("=", 1)[1]).parent
        # the second shell, typed as printed
        shell = f"{export.strip()}\n{path.split('#')[0].strip()}\n"
        second = subprocess.run(
            ["bash", "-c", f"{shell}kubectl create -f {BROKEN}\n"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (second.returncode, second.stdout) == (1, "")
        assert second.stderr.splitlines() == [says(REPO_ROOT / BROKEN)]
        for example in OWNER_EXAMPLES:  # their CRDs are installed: each says what it says
            typed = example.relative_to(REPO_ROOT)
            second = subprocess.run(
                ["bash", "-c", f"{shell}kubectl create -f {typed}\n"],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert says(example) in second.stdout.splitlines() + second.stderr.splitlines()
            assert second.returncode == (1 if says(example).startswith("Error") else 0)
        assert f"https://127.0.0.1:{port}" in "\n".join(run.lines)
        assert workdir.is_dir()
        assert processes_mentioning(str(workdir)) != []

        assert run.ctrl_c() == -signal.SIGINT  # make dies of it, after dev.run cleaned up
    finally:
        run.kill()
    assert processes_mentioning(str(workdir)) == []
    assert not workdir.exists()
    assert "Stopped: no process of this run is left" in "\n".join(run.lines)


def test_with_operators_the_jobset_controller_makes_jobs_the_webhook_patched_and_ctrl_c_stops_it(
    make_run_env: dict[str, str],
) -> None:
    tools_dir()
    operator_builds()  # built (or found) before the clock of this test starts
    run = MakeRun(make_run_env, f"--port={free_port()} --operators")
    try:
        export = run.wait_for("export KUBECONFIG=", timeout=180)
        path = run.wait_for("export PATH=", timeout=5)
        get_job = run.wait_for("kubectl get job v6e-multislice-slice-0", timeout=5)
        run.wait_for("Ctrl-C stops the webhook, the operators and the control plane", timeout=5)
        workdir = Path(export.split("=", 1)[1]).parent
        shell = f"{export.strip()}\n{path.split('#')[0].strip()}\n"
        created = subprocess.run(
            ["bash", "-c", f"{shell}kubectl create -f {JOBSET}\n"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert created.stdout.splitlines() == [says(REPO_ROOT / JOBSET)], created.stderr

        def job_env() -> str:  # the controller creates the Job soon after: wait for it
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                got = subprocess.run(
                    ["bash", "-c", shell + get_job.split("#")[0].strip()],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                if got.returncode == 0:
                    return got.stdout
                time.sleep(0.25)
            raise AssertionError(f"no Job of the JobSet: {got.stderr}")

        hosts = ",".join(f"v6e-multislice-slice-0-{i}.v6e-multislice" for i in range(4))
        assert f'{{"name":"TPU_WORKER_HOSTNAMES","value":"{hosts}"}}' in job_env()
        running = processes_mentioning(str(workdir))
        for name in NAMES:  # each operator's manager runs with the run's kubeconfig
            assert any(f"/operators/{name}-" in p for p in running), running

        assert run.ctrl_c() == -signal.SIGINT
    finally:
        run.kill()
    assert processes_mentioning(str(workdir)) == []
    assert not workdir.exists()


def test_the_crds_from_the_module_zip_are_the_operator_builds_crds() -> None:
    """make run's CRDs without a build (`go mod download` of the module) are the ones
    build.sh copies next to each operator, file for file."""
    for name, build in operator_builds().items():
        from_module = {f.name: f.read_bytes() for f in crd_files([module_crds(name)])}
        from_build = {f.name: f.read_bytes() for f in crd_files([build.crds])}
        assert from_module == from_build != {}


def test_ctrl_c_during_the_first_build_leaves_no_build_dir_or_process(
    make_run_env: dict[str, str], tmp_path: Path
) -> None:
    cache = tmp_path / "tools-cache"
    run = MakeRun({**make_run_env, "TPU_WEBHOOK_TOOLS_CACHE": str(cache)}, f"--port={free_port()}")
    try:
        run.wait_for("building etcd", timeout=600)  # after the modules are downloaded
        (build_dir,) = cache.glob(".build-*")
        assert run.ctrl_c() == -signal.SIGINT
    finally:
        run.kill()
    assert processes_mentioning(str(cache)) == []
    assert list(cache.glob(".build-*")) == []
    assert not build_dir.exists()


def test_without_go_it_says_so_and_runs_the_webhook_alone(
    make_run_env: dict[str, str], tmp_path: Path
) -> None:
    go = shutil.which("go")
    assert go is not None
    no_go = [d for d in make_run_env["PATH"].split(os.pathsep) if not (Path(d) / "go").exists()]
    env = {
        **make_run_env,
        "PATH": os.pathsep.join(no_go),
        "TPU_WEBHOOK_TOOLS_CACHE": str(tmp_path / "empty-cache"),
    }
    port = free_port()
    run = MakeRun(env, f"--port={port}")
    try:
        run.wait_for("Go is not installed", timeout=60)
        run.wait_for("Running the webhook alone", timeout=5)
        run.wait_for(f"development mode: https://127.0.0.1:{port}", timeout=60)
        assert run.ctrl_c() == -signal.SIGINT
    finally:
        run.kill()
    assert processes_mentioning(f"--port {port}") == []
