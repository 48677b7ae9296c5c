"""`tpu-webhook`: serve, certs, check, render, explain."""

from __future__ import annotations

import argparse
import base64
import io
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError
from ruamel.yaml import YAML

from webhook.admission.dispatch import Policy
from webhook.catalog import CatalogError, load_catalog
from webhook.certs import CA_FILE, make_ca, make_serving_cert, service_names, write_pair
from webhook.examples import KINDS, example_manifests
from webhook.offline import ManifestError, Result, admit, read_objects
from webhook.policy.decide import Options
from webhook.policy.rules import BY_CODE, RULES

EXIT_OK, EXIT_DENIED, EXIT_UNREADABLE = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (CatalogError, ManifestError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    except BrokenPipeError:  # pragma: no cover - `| head`
        return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpu-webhook",
        description="Validate and complete Cloud TPU workloads on GKE, in the cluster or offline.",
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the admission webhook over HTTPS")
    for flag, kind, text in (
        ("--host", str, "address to listen on (default 127.0.0.1)"),
        ("--port", int, "port (default 8443; 0 picks a free one)"),
        ("--tls-cert-file", Path, "serving certificate (PEM); reloaded when it changes"),
        ("--tls-key-file", Path, "serving key (PEM)"),
        ("--client-ca-file", Path, "require client certificates signed by this CA"),
        ("--dev-certs-dir", Path, "where development certificates are made (default certs/)"),
        ("--catalog", Path, "TPU catalog file extending the packaged one"),
        ("--log-level", str, "debug, info, warning or error"),
        ("--max-body-bytes", int, "largest AdmissionReview accepted (default 3 MiB)"),
    ):
        serve.add_argument(flag, type=kind, help=text)
    serve.set_defaults(run=_serve)

    certs = sub.add_parser("certs", help="make a CA and a serving certificate for the webhook")
    certs.add_argument("--service", default="tpu-webhook")
    certs.add_argument("--namespace", default="tpu-webhook")
    certs.add_argument("--out", type=Path, default=Path("certs"))
    certs.add_argument("--dns", action="append", default=[], help="extra DNS name (repeatable)")
    certs.add_argument("--ip", action="append", default=[], help="extra IP address (repeatable)")
    certs.add_argument("--days", type=int, default=365, help="serving certificate validity")
    certs.add_argument("--ca-days", type=int, default=3650, help="CA validity")
    certs.set_defaults(run=_certs)

    for name, text, run in (
        ("check", "check manifests as the webhook would", _check),
        ("render", "print manifests as they would be stored", _render),
    ):
        command = sub.add_parser(name, help=text)
        command.add_argument(
            "-f",
            "--filename",
            required=True,
            action="append",
            help="file, directory or - for stdin (repeatable)",
        )
        command.add_argument(
            "--catalog", type=Path, help="TPU catalog file extending the packaged one"
        )
        if name == "check":
            command.add_argument("-o", "--output", choices=["text", "json"], default="text")
        command.set_defaults(run=run)

    rules = sub.add_parser("rules", help="every rule code, or what one checks and how to fix it")
    rules.add_argument("code", nargs="?", help="a rule code, e.g. tpu.chips-per-host")
    rules.add_argument("-o", "--output", choices=["text", "json"], default="text")
    rules.set_defaults(run=_rules)

    explain = sub.add_parser("explain", help="what a TPU shape needs, with a ready manifest")
    explain.add_argument("accelerator")
    explain.add_argument("topology", nargs="?")
    explain.add_argument(
        "--kind",
        choices=KINDS,
        default="job",
        help="print an Indexed Job and its headless Service (job) or a JobSet (jobset)",
    )
    explain.add_argument("--catalog", type=Path)
    explain.set_defaults(run=_explain)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from webhook.serving.server import serve
    from webhook.settings import Settings

    given = {k: v for k, v in vars(args).items() if k != "run" and v is not None}
    try:
        settings = Settings(**given)
    except ValidationError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    return serve(settings)


def _certs(args: argparse.Namespace) -> int:
    ca = make_ca(days=args.ca_days)
    names = [*service_names(args.service, args.namespace), *args.dns]
    write_pair(args.out, ca, make_serving_cert(ca, names, args.ip, days=args.days))
    print(
        f"# wrote {args.out}/{{ca.crt,ca.key,tls.crt,tls.key}} for {', '.join(names)}",
        file=sys.stderr,
    )
    print(base64.b64encode((args.out / CA_FILE).read_bytes()).decode())
    return EXIT_OK


def _policy(args: argparse.Namespace) -> Policy:
    return Policy(load_catalog(args.catalog), Options())


def _admit_all(args: argparse.Namespace) -> list[Result]:
    policy = _policy(args)
    return [admit(obj, policy) for source in args.filename for _, obj in read_objects(source)]


def _check(args: argparse.Namespace) -> int:
    results = _admit_all(args)
    if args.output == "json":
        print(orjson.dumps([r.as_json() for r in results], option=orjson.OPT_INDENT_2).decode())
    else:
        for r in results:
            verdict = (
                "denied" if r.denials else ("admitted with warnings" if r.warnings else "admitted")
            )
            count = len(r.patch)
            patched = (
                f" (patched: {count} operation{'s' * (count != 1)})" if count and r.allowed else ""
            )
            print(f"{r.kind}/{r.name}: {verdict}{patched}")
            for v in r.denials:
                print(f"  error [{v.code}] {v.message}")
            for v in r.warnings:
                print(f"  warning [{v.code}] {v.message}")
    return EXIT_DENIED if any(not r.allowed for r in results) else EXIT_OK


def _render(args: argparse.Namespace) -> int:
    results = _admit_all(args)
    for r in results:
        for v in r.denials:
            print(f"# {r.kind}/{r.name}: denied [{v.code}] {v.message}", file=sys.stderr)
    print(dump_yaml([r.stored for r in results]), end="")
    return EXIT_DENIED if any(not r.allowed for r in results) else EXIT_OK


def _rules(args: argparse.Namespace) -> int:
    chosen = list(RULES)
    if args.code is not None:
        rule = BY_CODE.get(args.code)
        if rule is None:
            print(f"error: no rule {args.code}; `tpu-webhook rules` lists them", file=sys.stderr)
            return EXIT_UNREADABLE
        chosen = [rule]
    if args.output == "json":
        rows = [
            {
                "code": r.code,
                "severity": r.severity.value,
                "checks": r.checks,
                "warnsWhen": r.when_warning,
                "why": r.why,
                "fix": r.fix,
                "example": r.example,
            }
            for r in chosen
        ]
        print(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return EXIT_OK
    if args.code is None:
        width = max(len(r.code) for r in chosen)
        for r in chosen:
            print(f"{r.code:<{width}}  {r.severity.value:<15}  {r.checks}")
        return EXIT_OK
    (rule,) = chosen
    print(f"{rule.code} ({rule.severity.value})")
    for label, text in (
        ("checks", rule.checks),
        ("warns", rule.when_warning),
        ("why", rule.why),
        ("fix", rule.fix),
        ("example", rule.example),
    ):
        if text:
            print(f"  {label + ':':<9}{text}")
    return EXIT_OK


def _explain(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.catalog)
    accelerator = catalog.accelerator(args.accelerator)
    if accelerator is None:
        meant = catalog.near_miss(args.accelerator)
        hint = f"; did you mean {meant}?" if meant else f"; known: {catalog.names()}"
        print(f"error: {args.accelerator} is not in the TPU catalog{hint}", file=sys.stderr)
        return EXIT_DENIED
    print(f"{accelerator.name} ({accelerator.generation})")
    for m in accelerator.machine_types:
        print(f"  machine type {m.name}: {m.chips} chips, {m.cpu_text} cpu, {m.memory_text} memory")
    if args.topology is None:
        print(f"  topologies: {accelerator.offered()}")
        for topology, shapes in list(accelerator.shapes.items())[:24]:
            print(f"    {topology}: " + "; ".join(s.describe().split(" = ", 1)[1] for s in shapes))
        return EXIT_OK
    shapes = catalog.shapes(accelerator, args.topology)
    if not shapes:
        print(f"error: {accelerator.name} offers {accelerator.offered()}", file=sys.stderr)
        return EXIT_DENIED
    for shape in shapes:
        print(f"  {shape.describe()}")
    print(dump_yaml(example_manifests(shapes[-1], args.kind)), end="")
    return EXIT_OK


def dump_yaml(documents: Sequence[Mapping[str, Any]]) -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096  # long values (hostnames, commands) stay on one line
    out = io.StringIO()
    yaml.dump_all([orjson.loads(orjson.dumps(d)) for d in documents], out)
    return "---\n" + out.getvalue() if documents else ""
