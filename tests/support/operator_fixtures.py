"""Pytest plugin: the real JobSet, LeaderWorkerSet and KubeRay operators (``operators``).

Loaded from ``tests/conftest.py`` next to ``tests.support.fixtures``. The operators are
built (or found in the cache) once, during collection, and only when a collected test
uses ``operators``, so a cold build does not count against a test's timeout. They run
on the session's ``control_plane``; their logs are kept with its logs when a test fails.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dev.controlplane import ControlPlane
from tests.support.operators import Operators, operator_builds

FIXTURE = "operators"

_build_error = pytest.StashKey[BaseException]()


@pytest.hookimpl(trylast=True)  # after `-m`/`-k` deselected: `-m "not e2e"` builds nothing
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.collectonly:
        return
    if any(FIXTURE in getattr(item, "fixturenames", ()) for item in items):
        try:
            operator_builds()
        except Exception as exc:  # reported by the fixture, per test
            config.stash[_build_error] = exc


@pytest.fixture(scope="session")
def operators(request: pytest.FixtureRequest, control_plane: ControlPlane) -> Iterator[Operators]:
    """JobSet, LWS and KubeRay managers (JobSet's and LWS's webhooks registered)."""
    if _build_error in request.config.stash:
        raise request.config.stash[_build_error]
    with Operators(control_plane, operator_builds()) as ops:
        yield ops
