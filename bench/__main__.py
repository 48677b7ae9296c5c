"""`python -m bench [--quick | --full]`: our webhook against the ceiling; see bench/README.md."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from functools import partial
from pathlib import Path

import orjson

from bench.cluster_cache import populated, wait_until_read
from bench.corpus import CORPUS_DIR, load_corpus
from bench.inprocess import Cost, measure
from bench.procs import Server, stop_all
from bench.report import command_line, markdown, revision_now
from bench.run import LOAD_CORE, PROFILES, SERVER_CORE, ServerResult, bench_servers
from bench.wrk import ensure_wrk
from tests.support.webhook_process import make_certs

SERVERS = ("webhook", "ceiling")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if len(os.sched_getaffinity(0) | {SERVER_CORE, LOAD_CORE}) > (os.cpu_count() or 1):
        raise SystemExit("the benchmark needs two cores: the server on 0, the load on 1")
    profile = PROFILES["quick" if args.quick else "full" if args.full else "default"]
    corpus = load_corpus()
    reviews = [r for r in corpus if not args.review or r.name in args.review]
    files = {r.name: CORPUS_DIR / r.filename for r in corpus}  # the TPU Job's for every run
    ensure_wrk()
    os.sched_setaffinity(0, {LOAD_CORE})  # this process drives the open-loop client
    atexit.register(stop_all)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda n, _: sys.exit(128 + n))
    revision = revision_now()  # what the servers will load
    work = Path(tempfile.mkdtemp(prefix="tpu-webhook-bench-"))
    results: dict[str, ServerResult] = {}
    costs: list[Cost] = []
    try:
        make_certs(work)
        print(f"# {', '.join(args.servers)}: {profile.name} profile", flush=True)
        servers = [_server(name, work) for name in args.servers]
        servers += [_server(name, work, root) for name, root in args.compare]
        with contextlib.ExitStack() as stack:
            if args.cluster_cache is not None:
                _read_cluster(stack, servers, *args.cluster_cache)
            results = bench_servers(servers, reviews, profile, files, args.rounds, corpus)
        if not args.no_inprocess:
            os.sched_setaffinity(0, {SERVER_CORE})
            costs = measure(reviews, profile.budget)
            os.sched_setaffinity(0, {LOAD_CORE})
    finally:
        stop_all()
        if args.keep:
            print(f"# kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    report = markdown(command_line(), results, costs, profile.name, revision)
    print(report)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "report.md").write_text(report)
        raw = {"profile": profile.name, "results": results, "costs": costs}
        (args.out / "results.json").write_bytes(orjson.dumps(raw, option=orjson.OPT_INDENT_2))
    return 0


def _read_cluster(
    stack: contextlib.ExitStack, servers: list[Server], nodes: int, classes: int
) -> None:
    """A control plane holding the Nodes and classes (on the load core, as this process), read
    by every webhook server before its load starts."""
    print(f"# a control plane with {nodes} TPU Nodes and {classes} ComputeClasses", flush=True)
    env = stack.enter_context(populated(nodes, classes))
    for server in servers:
        if server.name != "ceiling":
            server.env.update(env)
            server.after_start = partial(wait_until_read, nodes=nodes, classes=classes)


def _server(name: str, work: Path, root: Path | None = None) -> Server:
    """Our server, the ceiling, or (with `root`) our server from another source tree."""
    cert, key = str(work / "tls.crt"), str(work / "tls.key")
    if name == "webhook" or root is not None:
        args = ["webhook", "serve", "--port", "{port}", "--tls-cert-file", cert]
        server = Server(name, [*args, "--tls-key-file", key], work)
        if root is not None:
            server.root = root  # `python -m webhook` imports that tree's webhook/
        return server
    return Server(name, ["bench.ceiling", "--port", "{port}", "--cert", cert, "--key", key], work)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="tpu-webhook serve against a bare ASGI ceiling, over real TLS on 127.0.0.1.",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="about a minute: 2 s runs")
    size.add_argument("--full", action="store_true", help="more rates and a 5-minute soak")
    parser.add_argument(
        "--servers",
        type=lambda s: [x for x in s.split(",") if x in SERVERS],
        default=list(SERVERS),
        help="comma-separated: webhook,ceiling (default both, one after the other)",
    )
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        type=_named_tree,
        metavar="NAME=DIR",
        help="also load `python -m webhook serve` run from source tree DIR, in turn with the "
        "others (before/after a change; repeatable)",
    )
    parser.add_argument(
        "--cluster-cache",
        type=_two_counts,
        metavar="NODES,CLASSES",
        help="our servers read a real API server holding this many TPU Nodes and ComputeClasses "
        "(clusterObjects on) before the load, e.g. 1000,50",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        metavar="N",
        help="make every closed-loop run N times, the servers alternating; each keeps its best "
        "round, and the report lists them all (a noisy host only ever slows a run)",
    )
    parser.add_argument("--review", action="append", help="only this corpus review (repeatable)")
    parser.add_argument("--out", type=Path, help="also write report.md and results.json here")
    parser.add_argument("--keep", action="store_true", help="keep the certificates and logs")
    parser.add_argument("--no-inprocess", action="store_true", help="skip the in-process timing")
    return parser


def _two_counts(text: str) -> tuple[int, int]:
    nodes, _, classes = text.partition(",")
    if not nodes.isdigit() or not classes.isdigit():
        raise argparse.ArgumentTypeError(f"expected NODES,CLASSES, e.g. 1000,50, got {text!r}")
    return int(nodes), int(classes)


def _named_tree(text: str) -> tuple[str, Path]:
    name, _, directory = text.partition("=")
    root = Path(directory).resolve()
    if not name or name in SERVERS or not (root / "webhook" / "__main__.py").is_file():
        raise argparse.ArgumentTypeError(f"expected NAME=DIR with DIR/webhook/, got {text!r}")
    return name, root


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # the servers and wrk were stopped on the way out
        print("interrupted; every process the benchmark started is stopped", file=sys.stderr)
        raise SystemExit(130) from None
