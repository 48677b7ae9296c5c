"""One server's share of a benchmark run: start it pinned, load it, watch its CPU and memory."""

from __future__ import annotations

import http.client
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson

from bench.corpus import Review
from bench.openloop import request_bytes, run_rate
from bench.procs import HOST, Server, client_context, core_busy
from bench.wrk import WrkResult, finish_wrk, run_wrk, start_wrk

SERVER_CORE, LOAD_CORE = 0, 1
NOISY_PCT, NOISE_TRIES = 15.0, 3  # a run is repeated while its core was this busy otherwise


@dataclass(frozen=True)
class Profile:
    name: str
    seconds: float  # each closed-loop run
    connections: tuple[int, ...]  # for every review
    job_connections: tuple[int, ...]  # for the TPU Job review
    rates: tuple[float, ...]  # offered req/s on the TPU Job review
    rate_seconds: float
    rate_connections: int
    soak_seconds: float  # our server only, all reviews rotating, 8 connections
    budget: float  # in-process timing batch, seconds


PROFILES = {
    "quick": Profile("quick", 2, (8,), (1, 8, 64), (1000,), 5, 8, 0, 0.05),
    "default": Profile("default", 10, (1, 8, 64), (1, 8, 64), (1000, 2000), 10, 8, 0, 0.2),
    "full": Profile("full", 10, (1, 8, 64), (1, 8, 64), (500, 1000, 2000, 4000), 20, 8, 300, 0.2),
}
JOB = "tpu-job"


@dataclass(frozen=True)
class Load:
    """One load run: closed-loop (`rate` 0) or open-loop at `rate` offered req/s."""

    server: str
    review: str
    connections: int
    rate: float
    requests: int
    throughput: float
    errors: int
    p50_us: float
    p99_us: float
    p999_us: float
    cpu_us: float  # server CPU (user + system) per request
    other_pct: float  # both cores busy with anything but server and load generator, %
    steal_pct: float
    rounds: tuple[float, ...] = ()  # with --rounds: the throughput of every round, in order


@dataclass
class ServerResult:
    server: str
    startup_s: float = 0.0
    rss_ready_kib: int = 0
    loads: list[Load] = field(default_factory=list)
    rss_by_requests: list[tuple[int, int]] = field(default_factory=list)  # (requests, KiB)
    soak: list[tuple[float, int]] = field(default_factory=list)  # (seconds, VmRSS KiB)
    peak_rss_kib: int = 0
    requests: int = 0


def bench_servers(
    servers: list[Server],
    reviews: list[Review],
    profile: Profile,
    files: dict[str, Path],
    rounds: int = 1,
    corpus: list[Review] | None = None,
) -> dict[str, ServerResult]:
    """Start each server in turn, then load them in turn, run by run (never two at once).

    Alternating run by run puts both servers under the same background noise, so the ratio
    holds on a busy machine; an idle server on the same core costs a wake-up per 0.1 s.
    With `rounds` > 1 every closed-loop run is made that many times, the servers alternating
    within each round, and each server keeps its best round (the one least disturbed by the
    host: noise only ever slows a run down), with every round's figure beside it.
    """
    results = {s.name: ServerResult(s.name) for s in servers}
    # the warm-up's and the open loop's review, from `corpus` when `--review` left it out
    job = next(r for r in [*reviews, *(corpus or ())] if r.name == JOB)
    for server in servers:
        server.start()
        results[server.name].startup_s = server.startup_seconds
        results[server.name].rss_ready_kib = server.memory_kib("VmRSS")
        for review in reviews:
            check_answer(server, review)
        _closed(server, results[server.name], job, files, 8, 1.0, quietest=False)  # warm-up
    for review in reviews:
        counts = profile.job_connections if review.name == JOB else profile.connections
        for connections in counts:
            runs: dict[str, list[Load]] = {server.name: [] for server in servers}
            for _ in range(rounds):
                for server in servers:
                    result = results[server.name]
                    load = _closed(server, result, review, files, connections, profile.seconds)
                    runs[server.name].append(load)
            for name, made in runs.items():
                best = max(made, key=lambda load: load.throughput)
                thrown = tuple(load.throughput for load in made) if rounds > 1 else ()
                results[name].loads.append(replace(best, rounds=thrown))
    for rate in profile.rates:
        for server in servers:
            _open(server, results[server.name], job, rate, profile)
    for server in servers:
        if profile.soak_seconds and server.name == "webhook":
            url = f"https://{HOST}:{server.port}"
            _soak(server, results[server.name], url, reviews, files, profile.soak_seconds)
        results[server.name].peak_rss_kib = server.memory_kib("VmHWM")
        server.stop()
    return results


def check_answer(server: Server, review: Review) -> None:
    """One request before the load: HTTP 200, and from our server the verdict the name says."""
    connection = http.client.HTTPSConnection(
        HOST, server.port, context=client_context(server.certs)
    )
    headers = {"Content-Type": "application/json"}
    try:
        connection.request("POST", review.path, review.body, headers)
        response = connection.getresponse()
        data = orjson.loads(response.read())
    finally:
        connection.close()
    answer = data.get("response", {}) if response.status == 200 else {}
    verdict = (
        "denied" if not answer.get("allowed") else "patched" if answer.get("patch") else "allowed"
    )
    if response.status != 200 or (server.name != "ceiling" and verdict != review.verdict):
        raise RuntimeError(
            f"{server.name} answered {review.filename} with {response.status} {data}"
        )


class _Meter:
    """Server CPU per request, and how much else ran on the two cores (noise) meanwhile.

    Noise is both cores' busy time less the server's and the load generator's CPU (wrk is a
    waited-for child, the open-loop client is this process), plus steal time, as a % of a core.
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self.wall = time.perf_counter()
        self.cpu = server.cpu_seconds()
        self.load = _load_cpu()
        self.cores = core_busy()

    def stop(self, requests: int) -> tuple[float, float, float]:
        wall = time.perf_counter() - self.wall
        cpu = self.server.cpu_seconds() - self.cpu
        load = _load_cpu() - self.load
        now = core_busy()
        busy = sum(now[c][0] - self.cores[c][0] for c in (SERVER_CORE, LOAD_CORE))
        steal = sum(now[c][1] - self.cores[c][1] for c in (SERVER_CORE, LOAD_CORE))
        other = max(0.0, busy - cpu - load)
        return cpu / max(requests, 1) * 1e6, other / wall * 100, steal / wall * 100


def _load_cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _closed(
    server: Server,
    result: ServerResult,
    review: Review,
    files: dict[str, Path],
    connections: int,
    seconds: float,
    quietest: bool = True,
) -> Load:
    url = f"https://{HOST}:{server.port}"

    def attempt() -> Load:
        server.truncate_log()
        meter = _Meter(server)
        run = run_wrk(url, [(review.path, files[review.name])], connections, seconds, LOAD_CORE)
        cpu_us, other, steal = meter.stop(run.requests)
        _count(server, result, run.requests)
        return _load(server.name, review.name, connections, 0, run, cpu_us, other, steal)

    return _quietest(attempt) if quietest else attempt()


def _quietest(attempt: Callable[[], Load]) -> Load:
    """Run again (up to NOISE_TRIES times) while other work or steal took the cores."""
    best = attempt()
    for _ in range(NOISE_TRIES - 1):
        if _noise(best) <= NOISY_PCT:
            break
        print(
            f"  {best.server} {best.review} x{best.connections}"
            + (f" at {best.rate:g}/s" if best.rate else "")
            + f": {best.other_pct:.0f}% other "
            f"work, {best.steal_pct:.0f}% steal on the two cores; again",
            flush=True,
        )
        again = attempt()
        best = again if _noise(again) < _noise(best) else best
    return best


def _noise(load: Load) -> float:
    return load.other_pct + load.steal_pct


def _count(server: Server, result: ServerResult, requests: int) -> None:
    result.requests += requests
    result.rss_by_requests.append((result.requests, server.memory_kib("VmRSS")))


def _load(
    server: str,
    review: str,
    connections: int,
    rate: float,
    run: WrkResult,
    cpu_us: float,
    other: float,
    steal: float,
) -> Load:
    return Load(
        server,
        review,
        connections,
        rate,
        run.requests,
        run.rate,
        run.errors,
        run.p50_us,
        run.p99_us,
        run.p999_us,
        cpu_us,
        other,
        steal,
    )


def _open(server: Server, result: ServerResult, review: Review, rate: float, p: Profile) -> None:
    request = request_bytes(review.path, review.body, server.port)
    context = client_context(server.certs)

    def attempt() -> Load:
        server.truncate_log()
        meter = _Meter(server)
        run = run_rate(server.port, context, request, rate, p.rate_seconds, p.rate_connections)
        cpu_us, other, steal = meter.stop(run.sent)
        _count(server, result, run.sent)
        return Load(
            server.name, review.name, p.rate_connections, rate, run.sent, run.achieved,
            run.errors, run.p50_us, run.p99_us, run.p999_us, cpu_us, other, steal,
        )  # fmt: skip

    result.loads.append(_quietest(attempt))


def _soak(
    server: Server,
    result: ServerResult,
    url: str,
    reviews: list[Review],
    files: dict[str, Path],
    seconds: float,
) -> None:
    """All reviews in rotation at 8 connections for `seconds`; VmRSS sampled every 10 s."""
    targets = [(r.path, files[r.name]) for r in reviews]
    process = start_wrk(url, targets, 8, seconds, LOAD_CORE)
    done = threading.Event()
    started = time.perf_counter()
    truncator = threading.Thread(target=_sample, args=(server, result, started, done))
    truncator.start()
    try:
        run = finish_wrk(process, seconds)
    finally:
        done.set()
        truncator.join()
    result.soak.append((time.perf_counter() - started, server.memory_kib("VmRSS")))
    _count(server, result, run.requests)


def _sample(server: Server, result: ServerResult, started: float, done: threading.Event) -> None:
    while not done.wait(10.0):
        result.soak.append((time.perf_counter() - started, server.memory_kib("VmRSS")))
        server.truncate_log()
