"""The dependency audit: what the image ships, as its SBOM lists it, checked against PyPI's
advisory feed, with the dated allow-list of accepted advisories (docker/audit-allowlist.yaml).

The feed and its limits are described in tests/support/audit.py. The audit tests need pypi.org (a
package registry, reachable wherever CI installs the dependencies); the allow-list's rules are
checked without it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from tests.image.conftest import INSTALL_TIMEOUT_S
from tests.support.audit import (
    ALLOWLIST,
    Accepted,
    Advisory,
    Finding,
    Report,
    audit,
    check,
    load_allowlist,
    render,
    sbom_packages,
)

TODAY = dt.date(2026, 12, 1)
ADVISORY = Advisory("GHSA-aaaa-bbbb-cccc", ("CVE-2026-0001",), ("2.0",), "https://osv.dev/x")
VULNERABLE = Finding("Some-Package", "1.0", newest="1.0", advisories=(ADVISORY,))


@pytest.mark.registry
@pytest.mark.timeout(INSTALL_TIMEOUT_S + 120)
def test_the_sbom_ships_no_known_vulnerability_and_no_yanked_release(sbom: Path) -> None:
    shipped = sbom_packages(sbom)
    report = audit(shipped, load_allowlist())
    summary = render(report)
    names = {name.lower() for name, _ in shipped}
    assert {"tpu-webhook", "fastapi", "uvicorn", "cryptography", "msgspec", "kubernetes"} <= names
    assert not names & {"pip", "setuptools", "wheel"}, "the runtime venv ships no installer"
    assert report.vulnerable == [], summary
    assert report.yanked == [], summary
    assert [f.name for f in report.not_on_pypi] == ["tpu-webhook"]


@pytest.mark.registry
@pytest.mark.usefixtures("pypi")
def test_the_feed_reports_a_known_vulnerable_release() -> None:
    """pycrypto 2.6.1 is its project's newest release and has advisories: the audit must fail."""
    report = audit([("pycrypto", "2.6.1")])
    assert [f.name for f in report.vulnerable] == ["pycrypto"]
    ids = {a.id for a in report.vulnerable[0].advisories}
    assert {"PYSEC-2017-94", "PYSEC-2018-97"} <= ids
    assert report.failed


@pytest.mark.registry
@pytest.mark.usefixtures("pypi")
def test_a_release_below_the_newest_is_reported_as_not_audited() -> None:
    finding = check("jinja2", "2.10")
    assert not finding.audited
    assert finding.advisories == ()
    assert finding.newest is not None
    assert finding.newest != "2.10"


# ------------------------------------------------------------------ the allow-list (no network)


def test_an_accepted_advisory_passes_until_its_expiry_and_is_named_with_its_reason() -> None:
    entry = Accepted("CVE-2026-0001", "some_package", "not reachable: no XML parsed", TODAY)
    report = Report([VULNERABLE], (entry,), today=TODAY)
    assert report.vulnerable == []
    assert not report.failed
    assert f"accepted until {TODAY}: Some-Package 1.0 GHSA-aaaa-bbbb-cccc" in render(report)
    assert "not reachable: no XML parsed" in render(report)


def test_an_expired_acceptance_fails_the_audit_again() -> None:
    entry = Accepted("GHSA-aaaa-bbbb-cccc", "some-package", "reason", TODAY - dt.timedelta(1))
    report = Report([VULNERABLE], (entry,), today=TODAY)
    assert [f.name for f in report.vulnerable] == ["Some-Package"]
    assert report.failed
    assert report.expired == [entry]
    assert "EXPIRED allow-list entry GHSA-aaaa-bbbb-cccc" in render(report)


@pytest.mark.parametrize(
    ("advisory", "package"),
    [("GHSA-aaaa-bbbb-cccc", "other-package"), ("GHSA-zzzz-zzzz-zzzz", "some-package")],
)
def test_an_acceptance_covers_only_its_own_advisory_and_package(
    advisory: str, package: str
) -> None:
    report = Report([VULNERABLE], (Accepted(advisory, package, "reason", TODAY),), today=TODAY)
    assert report.failed
    assert report.vulnerable[0].advisories == (ADVISORY,)


def test_the_allowlist_file_is_well_formed() -> None:
    entries = load_allowlist(ALLOWLIST)
    assert all(isinstance(e.expires, dt.date) and e.reason.strip() for e in entries)
    assert "accepted:" in ALLOWLIST.read_text()


@pytest.mark.parametrize(
    "entry",
    [
        "{id: GHSA-x, package: p, reason: r}",  # no expiry
        "{id: GHSA-x, package: p, reason: r, expires: soon}",  # not a date
        "{id: GHSA-x, package: p, reason: ' ', expires: 2027-01-01}",  # no reason
        "{id: GHSA-x, package: p, reason: r, expires: 2027-01-01, until: never}",  # unknown key
    ],
)
def test_a_malformed_allowlist_entry_is_an_error(tmp_path: Path, entry: str) -> None:
    path = tmp_path / "allowlist.yaml"
    path.write_text(f"accepted:\n  - {entry}\n")
    with pytest.raises(ValueError, match="entry 1"):
        load_allowlist(path)
