"""`python -m bench.instructions`: instructions per review in each server, counted by callgrind.

Requests per second on a shared 2-core VM move by 30 points from one 2 s run to the next (the
host's other tenants; bench/RESULTS.md), more than the margin of a ratio target. Instructions
executed do not move with the host. Each server (tpu-webhook serve, the ceiling of
bench/ceiling.py, and any `--compare NAME=DIR` source tree) runs under
`valgrind --tool=callgrind` (some 50 times slower); for each corpus review: WARM_UP requests on
CONNECTIONS keep-alive TLS connections, the counters zeroed (`callgrind_control -z`), `--requests`
more, the counters dumped (`-d`), and the dump's total divided by them. Everything the server
process runs counts (TLS, uvicorn, httptools, the app), as in its CPU time; the ratio to the
ceiling is the ratio of instructions, not of req/s (instructions per cycle differ a little).

    python -m bench.instructions [--requests 800] [--connections 8] [--compare old=/tmp/old]
                                 [--review NAME]

Needs valgrind (`apt-get install valgrind`). About 2 minutes per server.
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.__main__ import _named_tree, _server
from bench.corpus import Review, load_corpus
from bench.procs import HOST, Server, client_context, stop_all
from tests.support.webhook_process import make_certs

CONNECTIONS = 8
WARM_UP = 200


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed: apt-get install valgrind")
    reviews = [r for r in load_corpus() if not args.review or r.name in args.review]
    work = Path(tempfile.mkdtemp(prefix="tpu-webhook-instructions-"))
    counts: dict[str, dict[str, int]] = {}
    try:
        make_certs(work)
        servers = [_server("ceiling", work), _server("webhook", work)]
        servers += [_server(name, work, root) for name, root in args.compare]
        for server in servers:
            print(f"# {server.name} under callgrind", file=sys.stderr, flush=True)
            counts[server.name] = count_server(
                server, reviews, args.requests, work, args.connections
            )
    finally:
        stop_all()
        shutil.rmtree(work, ignore_errors=True)
    print(report(counts, reviews, args.requests, args.connections))
    return 0


def count_server(
    server: Server,
    reviews: list[Review],
    requests: int,
    work: Path,
    connections: int = CONNECTIONS,
) -> dict[str, int]:
    """Instructions per request for each review, in one server started under callgrind."""
    dumps = work / f"{server.name}.callgrind"
    server.wrapper = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={dumps}.%p"]
    server.start(timeout=600)
    per_review = {}
    pool = connect(server, connections)
    try:
        for review in reviews:
            load(server, review, max(WARM_UP, connections), pool)
            for old in work.glob(f"{server.name}.callgrind.*"):
                old.unlink()
            _control("-z", server.pid)
            load(server, review, requests, pool)
            _control("-d", server.pid)
            per_review[review.name] = _dumped(work, server.name) // requests
    finally:
        for connection in pool:
            connection.close()
        server.stop()
    return per_review


def connect(server: Server, connections: int) -> list[http.client.HTTPSConnection]:
    """Keep-alive connections to the server, opened by the warm-up and kept through the count:
    TLS handshakes are not what is counted."""
    context = client_context(server.certs)
    return [
        http.client.HTTPSConnection(HOST, server.port, context=context, timeout=600)
        for _ in range(connections)
    ]


def load(
    server: Server, review: Review, requests: int, pool: list[http.client.HTTPSConnection]
) -> None:
    """`requests` POSTs of the review, spread over the connections of `pool` (a thread each:
    under callgrind the server is the bottleneck, so each keeps one request pending)."""
    body = review.body
    errors: list[BaseException] = []

    def run(connection: http.client.HTTPSConnection, count: int) -> None:
        try:
            for _ in range(count):
                connection.request("POST", review.path, body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                if response.status != 200:
                    raise RuntimeError(f"{server.name} answered {response.status}")
        except BaseException as error:
            errors.append(error)

    n = len(pool)
    share = [requests // n + (i < requests % n) for i in range(n)]
    threads = [
        threading.Thread(target=run, args=(connection, count))
        for connection, count in zip(pool, share, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _control(option: str, pid: int) -> None:
    subprocess.run(["callgrind_control", option, str(pid)], check=True, capture_output=True)


def _dumped(work: Path, name: str) -> int:
    """The instructions of the one dump written since the counters were zeroed."""
    for _ in range(100):
        for dump in work.glob(f"{name}.callgrind.*.*"):
            for line in dump.read_text().splitlines():
                if line.startswith("summary:"):
                    return int(line.split()[1])
        time.sleep(0.1)
    raise RuntimeError(f"no callgrind dump of {name} in {work}")


def report(
    counts: dict[str, dict[str, int]],
    reviews: list[Review],
    requests: int,
    connections: int = CONNECTIONS,
) -> str:
    names = list(counts)
    lines = [
        f"Instructions per request, whole server process (callgrind; {requests} requests on "
        f"{connections} connections per review, after {WARM_UP}); in brackets the ceiling's "
        "count divided by the server's (the share of the ceiling's throughput it would have "
        "at equal instructions per cycle):",
        "",
        "| review | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for review in reviews:
        ceiling = counts.get("ceiling", {}).get(review.name)
        cells = []
        for name in names:
            n = counts[name].get(review.name)
            share = f" ({ceiling / n:.0%})" if ceiling and n and name != "ceiling" else ""
            cells.append(f"{n:,}{share}" if n else "")
        lines.append(f"| {review.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--requests", type=int, default=800, help="counted per review (800)")
    parser.add_argument(
        "--connections", type=int, default=CONNECTIONS, help=f"keep-alive ({CONNECTIONS})"
    )
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        type=_named_tree,
        metavar="NAME=DIR",
        help="also count `python -m webhook serve` run from source tree DIR (repeatable)",
    )
    parser.add_argument("--review", action="append", help="only this corpus review (repeatable)")
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
