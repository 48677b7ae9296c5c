"""Pytest plugin: the real operators of the owner kinds (``operators``, ``trainer_operator``).

Loaded from ``tests/conftest.py`` next to ``tests.support.fixtures``. The operators are
built (or found in the cache) once, during collection, and only when a collected test uses
one of these fixtures, so a cold build does not count against a test's timeout. They run
on the session's ``control_plane``; their logs are kept with its logs when a test fails.

``operators`` (the session's) runs JobSet, LeaderWorkerSet and KubeRay, which most owner tests
share. ``trainer_operator`` runs Kubeflow Trainer beside them for one module and stops after it:
only its tests pay for it. Start-up times are printed in the terminal summary.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from dev.controlplane import ControlPlane
from dev.operator_builds import TITLES, operator_builds
from dev.operators import Operators

FIXTURES = ("operators", "trainer_operator")
#: The operators of the session's ``operators``.
SESSION: tuple[str, ...] = ("jobset", "lws", "kuberay")

_build_error = pytest.StashKey[BaseException]()
_figures = pytest.StashKey[dict[str, str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_figures] = {}


@pytest.hookimpl(trylast=True)  # after `-m`/`-k` deselected: `-m "not e2e"` builds nothing
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.collectonly:
        return
    if any(set(FIXTURES) & set(getattr(item, "fixturenames", ())) for item in items):
        try:
            operator_builds()
        except Exception as exc:  # reported by the fixture, per test
            config.stash[_build_error] = exc


def _titles(names: tuple[str, ...]) -> str:
    return ", ".join(TITLES[n] for n in names)


@pytest.fixture(scope="session")
def operators(request: pytest.FixtureRequest, control_plane: ControlPlane) -> Iterator[Operators]:
    """JobSet, LWS and KubeRay managers (JobSet's and LWS's webhooks registered)."""
    if _build_error in request.config.stash:
        raise request.config.stash[_build_error]
    builds = operator_builds()
    with Operators(control_plane, {n: builds[n] for n in SESSION}) as ops:
        request.config.stash[_figures][f"{_titles(SESSION)} start"] = f"{ops.start_seconds:.1f} s"
        yield ops


@pytest.fixture(scope="module")
def trainer_operator(
    request: pytest.FixtureRequest, control_plane: ControlPlane, operators: Operators
) -> Iterator[Operators]:
    """Kubeflow Trainer's manager and webhooks for the module that asks for them. Trainer makes
    JobSets, so the session's JobSet operator runs first. Its CRDs stay installed afterwards."""
    if _build_error in request.config.stash:
        raise request.config.stash[_build_error]
    figures = request.config.stash[_figures]
    began = time.monotonic()
    with Operators(control_plane, {"trainer": operator_builds()["trainer"]}) as ops:
        figures["Kubeflow Trainer start (CRDs, manager, webhooks)"] = f"{ops.start_seconds:.1f} s"
        yield ops
    module = request.node.name
    figures[f"{module} with Trainer running"] = f"{time.monotonic() - began:.1f} s"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    figures = terminalreporter.config.stash.get(_figures, {})
    if figures:
        terminalreporter.write_sep("-", "figures: operators")
        for name, value in figures.items():
            terminalreporter.write_line(f"{name}: {value}")
