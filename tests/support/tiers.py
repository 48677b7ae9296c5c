"""Pytest plugin: the preconditions of the `debian` and `registry` tiers, as fixtures.

``debian_packages`` needs the Debian packages `make setup` installs (tests/tools/debian.sh) and
``pypi`` needs the network to reach PyPI. Each fails, with one line saying what is missing,
rather than skip: `make test` installs the packages first and runs where PyPI is reachable, so
the full run skips nothing, and the tiers that cannot meet them (`make test-unit`) deselect
their tests by marker. A test that uses one of them (directly or through another fixture) must
carry its marker, or the session stops at collection: the tiers stay honest.

Loaded from ``tests/conftest.py``.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

DEBIAN_SH = Path(__file__).resolve().parents[1] / "tools" / "debian.sh"
PYPI = ("pypi.org", 443)
CONNECT_TIMEOUT_S = 10

#: fixture -> the marker every test using it carries
MARKER_OF = {"debian_packages": "debian", "pypi": "registry"}


@pytest.hookimpl(tryfirst=True)  # before -m deselects: every collected test is checked
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [
        f"{item.nodeid} uses {fixture} without @pytest.mark.{marker}"
        for item in items
        for fixture, marker in MARKER_OF.items()
        if fixture in getattr(item, "fixturenames", ()) and item.get_closest_marker(marker) is None
    ]
    if unmarked:
        raise pytest.UsageError("tests outside their tier:\n  " + "\n  ".join(unmarked))


@pytest.fixture(scope="session")
def debian_packages() -> None:
    """The Debian packages of `make setup` are installed (tests/tools/debian.sh --check)."""
    proc = subprocess.run(
        ["bash", str(DEBIAN_SH), "--check"], capture_output=True, text=True, timeout=30, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"{proc.stderr.strip()} (or: make setup)", pytrace=False)


@pytest.fixture(scope="session")
def pypi() -> None:
    """PyPI answers on this machine's network."""
    try:
        socket.create_connection(PYPI, timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        unreachable = str(exc)
    else:
        return
    pytest.fail(
        f"PyPI is unreachable ({unreachable}): this test needs the network (-m 'not registry')",
        pytrace=False,
    )
