"""The benchmark's report: the machine, the targets of issue 6, and every figure, in Markdown."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from bench.inprocess import Cost
from bench.run import JOB, Load, ServerResult

PACKAGES = ("uvicorn", "uvloop", "httptools", "msgspec", "orjson", "fastapi", "prometheus-client")
MB = 1000 * 1000


@dataclass(frozen=True)
class Target:
    what: str
    goal: str
    measured: str
    met: bool | None  # None: not measured in this run


def machine(revision: str) -> list[str]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    wrk = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False)
    versions = ", ".join(f"{p} {version(p)}" for p in PACKAGES)
    return [
        f"- code: {revision} (loaded when the run started)"
        + ("" if revision == (now := revision_now()) else f"; HEAD at the end: {now}"),
        f"- nproc: {os.cpu_count()}; CPU: {model}; kernel: {platform.release()}",
        f"- Python {platform.python_version()}; {versions}",
        f"- load generator: {(wrk.stdout or wrk.stderr).splitlines()[0]}",
        f"- load average at the end: {Path('/proc/loadavg').read_text().strip()}",
    ]


def revision_now() -> str:
    """The commit measured, and whether webhook/ differs from it."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "not a git checkout"
    changed = len(git("status", "--porcelain", "--", "webhook").splitlines())
    return f"{commit} ({changed} uncommitted changes in webhook/)" if changed else commit


def find(loads: list[Load], review: str, connections: int = 8, rate: float = 0) -> Load | None:
    return next(
        (
            x
            for x in loads
            if x.review == review and x.connections == connections and x.rate == rate
        ),
        None,
    )


def targets(ours: ServerResult, ceiling: ServerResult | None) -> list[Target]:
    job, ceil_job = find(ours.loads, JOB), find(ceiling.loads, JOB) if ceiling else None
    plain, ceil_plain = find(ours.loads, "plain-pod"), None
    if ceiling:
        ceil_plain = find(ceiling.loads, "plain-pod")
    at_1000 = find(ours.loads, JOB, rate=1000, connections=8)
    out = []
    if job and ceil_job:
        ratio = job.throughput / ceil_job.throughput
        text = f"{ratio:.0%} ({job.throughput:,.0f} vs {ceil_job.throughput:,.0f} req/s)"
        out.append(Target("TPU Job review, 8 connections", "≥ 60 % of ceiling", text, ratio >= 0.6))
    if at_1000:
        text = f"p99 {at_1000.p99_us / 1000:.2f} ms (p99.9 {at_1000.p999_us / 1000:.2f} ms)"
        out.append(Target("1,000 req/s offered", "p99 ≤ 2 ms", text, at_1000.p99_us <= 2000))
    if plain and ceil_plain:
        ratio = plain.cpu_us / ceil_plain.cpu_us
        text = f"{ratio:.2f}x ({plain.cpu_us:.0f} vs {ceil_plain.cpu_us:.0f} µs/request)"
        out.append(Target("non-TPU review CPU", "≤ 1.1x ceiling", text, ratio <= 1.1))
    startup = f"{ours.startup_s:.2f} s"
    out.append(Target("start-up to ready", "≤ 1 s", startup, ours.startup_s <= 1.0))
    after = next(((n, kib) for n, kib in ours.rss_by_requests if n >= 100_000), None)
    if after:
        text = f"{after[1] * 1024 / MB:.1f} MB after {after[0]:,} requests"
        text += f" (peak {ours.peak_rss_kib * 1024 / MB:.1f} MB after {ours.requests:,})"
        out.append(Target("RSS", "≤ 80 MB after 100k", text, after[1] * 1024 <= 80 * MB))
    else:
        out.append(Target("RSS", "≤ 80 MB after 100k", "fewer than 100k requests", None))
    out.append(_growth(ours))
    return out


def _growth(ours: ServerResult) -> Target:
    goal = "no growth over 5 min"
    if not ours.soak:
        return Target("RSS over a soak", goal, "not run (python -m bench --full)", None)
    base = next(kib for t, kib in ours.soak if t >= min(60.0, ours.soak[-1][0]))
    end_t, end = ours.soak[-1]
    grown = (end - base) * 1024 / MB
    text = f"{base * 1024 / MB:.1f} → {end * 1024 / MB:.1f} MB from 60 s to {end_t:.0f} s"
    return Target("RSS over a soak", goal, f"{text} ({grown:+.2f} MB)", grown <= 1.0)


def markdown(
    command: str,
    results: dict[str, ServerResult],
    costs: list[Cost],
    profile: str,
    revision: str,
) -> str:
    ours, ceiling = results.get("webhook"), results.get("ceiling")
    lines = [f"Command: `{command}` (profile `{profile}`)", "", *machine(revision), ""]
    if ours:
        lines += ["### Targets", "", "| target | goal | measured | met |", "|---|---|---|---|"]
        for t in targets(ours, ceiling):
            met = "—" if t.met is None else "yes" if t.met else "**no**"
            lines.append(f"| {t.what} | {t.goal} | {t.measured} | {met} |")
        lines.append("")
    lines += _closed_table(ours, ceiling) + _compare_table(results)
    lines += _open_table(results) + _memory_table(results)
    lines += _cost_table(costs)
    return "\n".join(lines) + "\n"


def _closed_table(ours: ServerResult | None, ceiling: ServerResult | None) -> list[str]:
    first = ours or ceiling
    if first is None:
        return []
    lines = [
        "### Closed loop (wrk, keep-alive; latency p50 / p99 / p99.9 in ms)",
        "",
        "| review | conns | ours req/s | ceiling req/s | ratio | ours latency | "
        "ceiling latency | ours CPU µs/req | ceiling CPU µs/req | noise % ours / ceiling |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for load in (x for x in first.loads if x.rate == 0):
        mine = find(ours.loads, load.review, load.connections) if ours else None
        theirs = find(ceiling.loads, load.review, load.connections) if ceiling else None
        ratio = f"{mine.throughput / theirs.throughput:.0%}" if mine and theirs else ""
        other = " / ".join(_noise(x) for x in (mine, theirs) if x)
        lines.append(
            f"| {load.review} | {load.connections} | {_rate(mine)} | {_rate(theirs)} | {ratio} "
            f"| {_lat(mine)} | {_lat(theirs)} | {_cpu(mine)} | {_cpu(theirs)} | {other} |"
        )
    return [*lines, ""]


def _compare_table(results: dict[str, ServerResult]) -> list[str]:
    """Every server of the run side by side: req/s and CPU µs per request (`--compare`)."""
    if not set(results) - {"webhook", "ceiling"}:
        return []
    names = list(results)
    lines = [
        "### Side by side (closed loop, in turn; req/s, CPU µs/req, % of the ceiling's req/s)",
        "",
        "| review | conns | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    first = next(iter(results.values()))
    for load in (x for x in first.loads if x.rate == 0):
        cells = []
        ceiling = results.get("ceiling")
        top = find(ceiling.loads, load.review, load.connections) if ceiling else None
        for name in names:
            x = find(results[name].loads, load.review, load.connections)
            share = (
                f" ({x.throughput / top.throughput:.0%})" if x and top and name != "ceiling" else ""
            )
            cells.append(f"{x.throughput:,.0f}, {x.cpu_us:.1f}{share}" if x else "")
        lines.append(f"| {load.review} | {load.connections} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _rate(x: Load | None) -> str:
    if x is None:
        return ""
    text = f"{x.throughput:,.0f}" + (f" ({x.errors} errors)" if x.errors else "")
    if x.rounds:
        text += " (rounds: " + ", ".join(f"{r:,.0f}" for r in x.rounds) + ")"
    return text


def _lat(x: Load | None) -> str:
    return f"{x.p50_us / 1000:.2f} / {x.p99_us / 1000:.2f} / {x.p999_us / 1000:.2f}" if x else ""


def _noise(x: Load) -> str:
    """Other work plus steal on the two cores during the run, % of one core."""
    return f"{x.other_pct + x.steal_pct:.0f}"


def _cpu(x: Load | None) -> str:
    return f"{x.cpu_us:.0f}" if x else ""


def _open_table(results: dict[str, ServerResult]) -> list[str]:
    rows = [x for r in results.values() for x in r.loads if x.rate]
    if not rows:
        return []
    lines = [
        "### Fixed offered rate (open loop, latency from the scheduled send; TPU Job review)",
        "",
        "| server | offered req/s | answered req/s | p50 ms | p99 ms | p99.9 ms | CPU µs/req "
        "| errors | noise % |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for x in sorted(rows, key=lambda x: (x.rate, x.server)):
        lines.append(
            f"| {x.server} | {x.rate:,.0f} | {x.throughput:,.0f} | {x.p50_us / 1000:.2f} | "
            f"{x.p99_us / 1000:.2f} | {x.p999_us / 1000:.2f} | {x.cpu_us:.0f} | {x.errors} | "
            f"{_noise(x)} |"
        )
    return [*lines, ""]


def _memory_table(results: dict[str, ServerResult]) -> list[str]:
    lines = [
        "### Start-up and memory (MB = 10^6 bytes)",
        "",
        "| server | start-up to ready | RSS ready | RSS after (requests) | peak RSS (VmHWM) |",
        "|---|---|---|---|---|",
    ]
    for r in results.values():
        steps = ", ".join(f"{kib * 1024 / MB:.1f} ({n:,})" for n, kib in r.rss_by_requests[::4])
        lines.append(
            f"| {r.server} | {r.startup_s:.2f} s | {r.rss_ready_kib * 1024 / MB:.1f} | {steps} "
            f"| {r.peak_rss_kib * 1024 / MB:.1f} |"
        )
    for r in results.values():
        if r.soak:
            series = ", ".join(f"{t:.0f} s: {kib * 1024 / MB:.2f}" for t, kib in r.soak)
            lines += ["", f"Soak of {r.server} (all reviews rotating, 8 connections), VmRSS MB: "]
            lines.append(series)
    return [*lines, ""]


def _cost_table(costs: list[Cost]) -> list[str]:
    if not costs:
        return []
    lines = [
        "### In process, µs per review (best of 5; no HTTP, no TLS)",
        "",
        "| review | parse | decide | respond | policy total | whole ASGI handler | ceiling |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in costs:
        lines.append(
            f"| {c.review} | {c.parse_us:.1f} | {c.decide_us:.1f} | {c.respond_us:.1f} | "
            f"{c.policy_us:.1f} | {c.asgi_us:.1f} | {c.ceiling_us:.1f} |"
        )
    return [*lines, ""]


def command_line() -> str:
    return " ".join([Path(sys.executable).name, "-m", "bench", *sys.argv[1:]])
