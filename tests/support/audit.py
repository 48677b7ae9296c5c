"""Known vulnerabilities in installed Python distributions, from PyPI's advisory feed.

    python -m tests.support.audit [--python PATH]   # default: this interpreter's environment

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
"""

from __future__ import annotations

import argparse
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


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    @property
    def vulnerable(self) -> list[Finding]:
        return [f for f in self.findings if f.audited and f.advisories]

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


def audit(packages: list[tuple[str, str]]) -> Report:
    with ThreadPoolExecutor(max_workers=8) as pool:
        return Report(list(pool.map(lambda p: check(*p), packages)))


def render(report: Report) -> str:
    audited = sum(f.audited for f in report.findings)
    lines = [
        f"{len(report.findings)} distributions: {audited} audited against PyPI's advisory feed, "
        f"{len(report.vulnerable)} vulnerable, "
        f"{len(report.yanked)} yanked, {len(report.unaudited)} not auditable here"
    ]
    for f in report.vulnerable:
        for a in f.advisories:
            fixed = ", ".join(a.fixed_in) or "no fixed release"
            lines.append(f"VULNERABLE {f.name} {f.version}: {a.id} ({fixed}) {a.link}")
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
    parser.add_argument("--python", default=sys.executable, help="the environment's interpreter")
    args = parser.parse_args(argv)
    report = audit(installed(args.python))
    sys.stdout.write(render(report) + "\n")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
