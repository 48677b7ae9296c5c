"""Pytest plugin: a session-scoped real control plane (``control_plane`` fixture).

Loaded from ``tests/conftest.py``. The tools are built (or found in the cache) once,
during collection, and only when a selected test uses ``control_plane`` (after ``-m``/``-k``
deselection, so ``pytest -m "not e2e"`` builds nothing), so a cold build does not count against
a test's timeout. When any test of the session failed,
the process logs are kept in ``.e2e-logs/<timestamp>/`` at the repository root.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from dev.controlplane import ControlPlane
from dev.tools import REPO_ROOT, tools_dir

LOGS_ROOT = REPO_ROOT / ".e2e-logs"
FIXTURE = "control_plane"

_failed = pytest.StashKey[bool]()
_kept_logs = pytest.StashKey[list[Path]]()
_build_error = pytest.StashKey[BaseException]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_failed] = False
    config.stash[_kept_logs] = []


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what will not run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.collectonly:
        return
    if any(FIXTURE in getattr(item, "fixturenames", ()) for item in items):
        try:
            tools_dir()
        except Exception as exc:  # reported by the fixture, per test
            config.stash[_build_error] = exc


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        item.config.stash[_failed] = True
    return report


def _logs_dir() -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return LOGS_ROOT / stamp


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A running etcd + kube-apiserver + kube-controller-manager, shared by the session."""
    config = request.config
    if _build_error in config.stash:
        raise config.stash[_build_error]
    cp = ControlPlane(tools_dir())
    try:
        cp.start()
    except BaseException:
        kept = cp.stop(keep_logs_in=_logs_dir())
        if kept is not None:
            config.stash[_kept_logs].append(kept)
        raise
    try:
        yield cp
    finally:
        kept = cp.stop(keep_logs_in=_logs_dir() if config.stash[_failed] else None)
        if kept is not None:
            config.stash[_kept_logs].append(kept)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for path in terminalreporter.config.stash.get(_kept_logs, []):
        terminalreporter.write_line(f"control-plane logs kept in {path}")
