"""The dependency audit: what the image ships, checked against PyPI's advisory feed.

The feed and its limits are described in tests/support/audit.py. These tests need pypi.org (a
package registry, reachable wherever CI installs the dependencies).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.image.conftest import INSTALL_TIMEOUT_S
from tests.support.audit import audit, check, installed, render


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 120)
def test_the_image_ships_no_known_vulnerability_and_no_yanked_release(venv: Path) -> None:
    shipped = installed(venv / "bin" / "python")
    report = audit(shipped)
    summary = render(report)
    names = {name.lower() for name, _ in shipped}
    assert {"tpu-webhook", "fastapi", "uvicorn", "cryptography", "msgspec"} <= names
    assert not names & {"pip", "setuptools"}, "the runtime venv ships no installer"
    assert report.vulnerable == [], summary
    assert report.yanked == [], summary
    assert [f.name for f in report.not_on_pypi] == ["tpu-webhook"]


def test_the_feed_reports_a_known_vulnerable_release() -> None:
    """pycrypto 2.6.1 is its project's newest release and has advisories: the audit must fail."""
    report = audit([("pycrypto", "2.6.1")])
    assert [f.name for f in report.vulnerable] == ["pycrypto"]
    ids = {a.id for a in report.vulnerable[0].advisories}
    assert {"PYSEC-2017-94", "PYSEC-2018-97"} <= ids
    assert report.failed


def test_a_release_below_the_newest_is_reported_as_not_audited() -> None:
    finding = check("jinja2", "2.10")
    assert not finding.audited
    assert finding.advisories == ()
    assert finding.newest is not None
    assert finding.newest != "2.10"
