"""Known vulnerabilities in Python distributions, from PyPI's advisory feed.

    python -m tests.support.audit [--python PATH]   # an environment; default: this interpreter's
    python -m tests.support.audit --lock FILE       # a lock file (docker/requirements.lock)
    python -m tests.support.audit --sbom FILE       # a CycloneDX SBOM (the image's sbom.cdx.json)

pip-audit asks PyPI about each release (/pypi/NAME/VERSION/json) or asks OSV; from this network
neither answers (the release endpoint is not served, OSV is unreachable), so pip-audit can only
report every package as "not found". The project endpoint (/pypi/NAME/json) is served, and lists
the advisories (the PyPA advisory database, the source of pip-audit's default service) that affect
the project's newest release. So, for each distribution:

- at the newest release: audited exactly, and any advisory listed fails the audit;
- a yanked release fails the audit;
- pinned below the newest release: the feed says nothing about it; reported as not audited,
  with the newest version, and the audit does not fail (a release upstream must not break CI);
- not on PyPI (tpu-webhook itself): reported as such.

An advisory accepted in the allow-list (docker/audit-allowlist.yaml: id, package, reason,
expires) does not fail the audit until the day after it expires; the report names it with its
reason, and an expired entry accepts nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from ruamel.yaml import YAML

from dev.lock import parse_lock

REPO_ROOT = Path(__file__).resolve().parents[2]
ALLOWLIST = REPO_ROOT / "docker" / "audit-allowlist.yaml"
PYPI = "https://pypi.org/pypi/{name}/json"
TIMEOUT_S = 30
LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted({(d.metadata['Name'], d.version) for d in m.distributions()})))"
)


@dataclass(frozen=True)
class Advisory:
    id: str
    aliases: tuple[str, ...]
    fixed_in: tuple[str, ...]
    link: str


@dataclass(frozen=True)
class Finding:
    name: str
    version: str
    newest: str | None = None  # None: not on PyPI
    advisories: tuple[Advisory, ...] = ()
    yanked: str | None = None  # the yank reason ("" when none was given)

    @property
    def audited(self) -> bool:
        return self.newest is not None and self.newest == self.version


@dataclass(frozen=True)
class Accepted:
    """An allow-list entry: a known advisory accepted for one package until a date."""

    id: str
    package: str
    reason: str
    expires: dt.date

    def accepts(self, finding: Finding, advisory: Advisory, today: dt.date) -> bool:
        return (
            today <= self.expires
            and canonicalize_name(self.package) == canonicalize_name(finding.name)
            and self.id in (advisory.id, *advisory.aliases)
        )


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    allowlist: tuple[Accepted, ...] = ()
    today: dt.date = field(default_factory=dt.date.today)

    def _accepted_by(self, finding: Finding, advisory: Advisory) -> Accepted | None:
        return next((a for a in self.allowlist if a.accepts(finding, advisory, self.today)), None)

    @property
    def vulnerable(self) -> list[Finding]:
        """Audited findings with their advisories that the allow-list does not accept."""
        out = []
        for f in self.findings:
            if f.audited and f.advisories:
                left = tuple(a for a in f.advisories if self._accepted_by(f, a) is None)
                if left:
                    out.append(Finding(f.name, f.version, f.newest, left, f.yanked))
        return out

    @property
    def accepted(self) -> list[tuple[Finding, Advisory, Accepted]]:
        return [
            (f, a, entry)
            for f in self.findings
            if f.audited
            for a in f.advisories
            if (entry := self._accepted_by(f, a)) is not None
        ]

    @property
    def expired(self) -> list[Accepted]:
        return [a for a in self.allowlist if a.expires < self.today]

    @property
    def yanked(self) -> list[Finding]:
        return [f for f in self.findings if f.yanked is not None]

    @property
    def unaudited(self) -> list[Finding]:
        return [f for f in self.findings if f.newest is not None and not f.audited]

    @property
    def not_on_pypi(self) -> list[Finding]:
        return [f for f in self.findings if f.newest is None]

    @property
    def failed(self) -> bool:
        return bool(self.vulnerable or self.yanked)


def load_allowlist(path: Path = ALLOWLIST) -> tuple[Accepted, ...]:
    """The allow-list's entries; a malformed entry is an error, not an empty acceptance."""
    data = YAML(typ="safe", pure=True).load(path.read_text()) or {}
    entries = []
    for number, item in enumerate(data.get("accepted") or [], start=1):
        keys = set(item) if isinstance(item, dict) else set()
        if keys != {"id", "package", "reason", "expires"}:
            raise ValueError(f"{path}: entry {number}: needs id, package, reason, expires")
        if not isinstance(item["expires"], dt.date) or not str(item["reason"]).strip():
            raise ValueError(f"{path}: entry {number}: expires must be a date, reason given")
        entries.append(
            Accepted(str(item["id"]), str(item["package"]), str(item["reason"]), item["expires"])
        )
    return tuple(entries)


def sbom_packages(path: Path) -> list[tuple[str, str]]:
    """(name, version) of a CycloneDX SBOM's root component and its components."""
    bom = json.loads(path.read_text())
    root = bom.get("metadata", {}).get("component")
    components = [*([root] if root else []), *bom.get("components", [])]
    return sorted((c["name"], c["version"]) for c in components)


def lock_packages(path: Path) -> list[tuple[str, str]]:
    """(name, version) of every entry of a lock file written by `make lock`."""
    return [(pin.name, pin.version) for pin in parse_lock(path.read_text())]


def installed(python: Path | str = sys.executable) -> list[tuple[str, str]]:
    """(name, version) of every distribution in `python`'s environment."""
    out = subprocess.run(
        [str(python), "-c", LIST_DISTRIBUTIONS], capture_output=True, text=True, check=True
    ).stdout
    return [(name, version) for name, version in json.loads(out)]


def check(name: str, version: str) -> Finding:
    """What PyPI's project feed says about this release (raises on network errors)."""
    url = PYPI.format(name=canonicalize_name(name))
    try:
        project = _fetch(url)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return Finding(name, version)
        raise
    files = project.get("releases", {}).get(version) or []
    yanked = next((f.get("yanked_reason") or "" for f in files if f.get("yanked")), None)
    newest = project["info"]["version"]
    advisories = tuple(
        Advisory(
            id=v["id"],
            aliases=tuple(v.get("aliases") or ()),
            fixed_in=tuple(v.get("fixed_in") or ()),
            link=v.get("link") or "",
        )
        for v in (project.get("vulnerabilities") or [])
        if not v.get("withdrawn")
    )
    return Finding(name, version, newest, advisories if newest == version else (), yanked)


def _fetch(url: str, attempts: int = 3) -> Any:
    """The JSON at `url`; a dropped connection or a timeout is retried (as pip retries)."""
    for attempt in range(1, attempts + 1):
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
                return json.load(response)
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, TimeoutError, ConnectionError):
            if attempt == attempts:
                raise
            time.sleep(attempt)
    raise AssertionError("unreachable")


def audit(
    packages: list[tuple[str, str]],
    allowlist: tuple[Accepted, ...] = (),
    today: dt.date | None = None,
) -> Report:
    with ThreadPoolExecutor(max_workers=8) as pool:
        findings = list(pool.map(lambda p: check(*p), packages))
    return Report(findings, allowlist, today or dt.date.today())


def render(report: Report) -> str:
    audited = sum(f.audited for f in report.findings)
    lines = [
        f"{len(report.findings)} distributions: {audited} audited against PyPI's advisory feed, "
        f"{len(report.vulnerable)} vulnerable, {len(report.accepted)} accepted advisories, "
        f"{len(report.yanked)} yanked, {len(report.unaudited)} not auditable here"
    ]
    for f in report.vulnerable:
        for a in f.advisories:
            fixed = ", ".join(a.fixed_in) or "no fixed release"
            lines.append(f"VULNERABLE {f.name} {f.version}: {a.id} ({fixed}) {a.link}")
    for f, a, entry in report.accepted:
        lines.append(f"accepted until {entry.expires}: {f.name} {f.version} {a.id}: {entry.reason}")
    for entry in report.expired:
        lines.append(
            f"EXPIRED allow-list entry {entry.id} ({entry.package}, {entry.expires}): it accepts "
            "nothing now; renew it deliberately or remove it"
        )
    for f in report.yanked:
        lines.append(f"YANKED {f.name} {f.version}: {f.yanked or 'no reason given'}")
    for f in report.unaudited:
        lines.append(
            f"not audited: {f.name} {f.version} (newest {f.newest}; the feed covers only the "
            "newest release)"
        )
    for f in report.not_on_pypi:
        lines.append(f"not on PyPI: {f.name} {f.version}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.audit", description=__doc__)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--python", default=sys.executable, help="the environment's interpreter")
    source.add_argument("--lock", type=Path, help="a lock file written by `make lock`")
    source.add_argument("--sbom", type=Path, help="a CycloneDX JSON SBOM")
    parser.add_argument("--allowlist", type=Path, default=ALLOWLIST, help="accepted advisories")
    args = parser.parse_args(argv)
    if args.lock:
        packages = lock_packages(args.lock)
    elif args.sbom:
        packages = sbom_packages(args.sbom)
    else:
        packages = installed(args.python)
    report = audit(packages, load_allowlist(args.allowlist))
    sys.stdout.write(render(report) + "\n")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
