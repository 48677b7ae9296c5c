"""`tpu-webhook` (also `kubectl tpu`, a kubectl plugin): serve, certs, check, render, rules,
explain, and on a live cluster audit and why (webhook/live.py).

Exit codes: 0 all admitted, 1 any denied (or an unknown accelerator), 2 input that cannot be read
(one line naming the file and the problem), 3 a bug in tpu-webhook (one line, never a traceback).
"""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pydantic import ValidationError

from webhook.admission.dispatch import Cluster, Policy
from webhook.catalog import CatalogError, load_catalog
from webhook.certificates.create import (
    CA_FILE,
    make_ca,
    make_serving_cert,
    service_names,
    write_pair,
)
from webhook.examples import KINDS, example_manifests
from webhook.manifests import ManifestError, read_objects
from webhook.offline import Result, admit
from webhook.output import OutputError, accelerator_data, dump, kubectl_list, verdicts_text
from webhook.policy.cluster import CLUSTER_KINDS, view_for
from webhook.policy.decide import Options
from webhook.policy.offered import Declared, OfferPolicy
from webhook.policy.rules import BY_CODE, RULES

EXIT_OK, EXIT_DENIED, EXIT_UNREADABLE, EXIT_BUG = 0, 1, 2, 3
PLUGIN_PROG = "kubectl tpu"  # kubectl runs `kubectl-tpu` from PATH for `kubectl tpu ...`


def main(argv: Sequence[str] | None = None, prog: str = "tpu-webhook") -> int:
    parser = _parser(prog)
    args = parser.parse_args(argv)
    if "run" not in args:  # no command: help, as kubectl and its plugins do
        parser.print_help()
        return EXIT_OK
    try:
        return int(args.run(args))
    except (CatalogError, ManifestError, OutputError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    except BrokenPipeError:  # pragma: no cover - `| head`
        return EXIT_OK
    except Exception as error:  # a bug: one line, as promised, instead of a traceback
        print(f"error: internal error ({type(error).__name__}: {error}); please report it "
              "with the input", file=sys.stderr)  # fmt: skip
        return EXIT_BUG


def plugin_main() -> int:
    """`kubectl-tpu`: the same commands, named as kubectl shows them."""
    return main(sys.argv[1:], prog=PLUGIN_PROG)


def _version() -> str:
    try:
        return version("tpu-webhook")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Validate and complete Cloud TPU workloads on GKE, in the cluster or offline.",
        epilog="Exit codes: 0 admitted, 1 denied, 2 unreadable input, 3 a bug in tpu-webhook.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(metavar="COMMAND")
    _serve_command(sub.add_parser("serve", help="run the admission webhook over HTTPS"))
    _certs_command(
        sub.add_parser("certs", help="make a CA and a serving certificate for the webhook")
    )
    _offline_command(
        sub.add_parser("check", help="check manifests as the webhook would"),
        _check,
        ["text", "json", "yaml"],
    )
    _offline_command(
        sub.add_parser("render", help="print manifests as they would be stored"),
        _render,
        ["yaml", "json"],
    )
    _rules_command(
        sub.add_parser("rules", help="every rule code, or what one checks and how to fix it")
    )
    _explain_command(
        sub.add_parser("explain", help="what a TPU shape needs, with a ready manifest")
    )
    _audit_command(
        sub.add_parser("audit", help="decide the TPU workloads stored in a cluster, as today")
    )
    _why_command(sub.add_parser("why", help="why a TPU workload is Pending or crash-looping"))
    return parser


def _serve_command(serve: argparse.ArgumentParser) -> None:
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


def _certs_command(certs: argparse.ArgumentParser) -> None:
    certs.add_argument("--service", default="tpu-webhook")
    certs.add_argument("--namespace", default="tpu-webhook")
    certs.add_argument("--out", type=Path, default=Path("certs"))
    certs.add_argument("--dns", action="append", default=[], help="extra DNS name (repeatable)")
    certs.add_argument("--ip", action="append", default=[], help="extra IP address (repeatable)")
    certs.add_argument("--days", type=int, default=365, help="serving certificate validity")
    certs.add_argument("--ca-days", type=int, default=3650, help="CA validity")
    certs.set_defaults(run=_certs)


def _offline_command(
    command: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], int],
    formats: list[str],
) -> None:
    """`check` and `render`: manifests in, decided offline; `formats`, the first the default."""
    command.add_argument(
        "-f",
        "--filename",
        required=True,
        action="append",
        help="file, directory or - for stdin (repeatable)",
    )
    command.add_argument("--catalog", type=Path, help="TPU catalog file extending the packaged one")
    command.add_argument(
        "--cluster-objects",
        action="append",
        default=[],
        metavar="PATH",
        help="a cluster's objects the decisions read (ComputeClasses...): file or directory, "
        "e.g. `kubectl get computeclasses -o yaml` saved (repeatable); the manifests' own "
        "are read too",
    )
    command.add_argument(
        "--offered",
        action="append",
        default=[],
        metavar="ACCELERATOR[=TOPOLOGY,...]",
        help="a TPU shape the cluster offers, as the administrator declares it "
        "(tpu-v6e-slice=2x4,8x8; no topologies: any) (repeatable); shapes are also read from "
        "the Nodes, ComputeClasses, ResourceFlavors and xpk ConfigMap in --cluster-objects",
    )
    command.add_argument(
        "--enforce-offered",
        action="store_true",
        help="deny a shape the --offered list does not offer (otherwise a warning)",
    )
    command.add_argument(
        "--profile",
        choices=["standard", "autopilot"],
        default="standard",
        help="also apply what GKE Autopilot refuses (host namespaces, host ports...)",
    )
    command.add_argument("-o", "--output", choices=formats, default=formats[0])
    command.set_defaults(run=run)


def _rules_command(rules: argparse.ArgumentParser) -> None:
    rules.add_argument("code", nargs="?", help="a rule code, e.g. tpu.chips-per-host")
    rules.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    rules.set_defaults(run=_rules)


def _explain_command(explain: argparse.ArgumentParser) -> None:
    explain.add_argument("accelerator", help="e.g. tpu-v6e-slice")
    explain.add_argument("topology", nargs="?", help="e.g. 4x4 (all topologies when omitted)")
    explain.add_argument(
        "--kind",
        choices=KINDS,
        default="job",
        help="print an Indexed Job and its headless Service (job) or a JobSet (jobset)",
    )
    explain.add_argument("--catalog", type=Path)
    explain.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    explain.set_defaults(run=_explain)


def _connection_flags(command: argparse.ArgumentParser) -> None:
    """How `audit` and `why` reach the cluster, as kubectl's flags do."""
    command.add_argument("--kubeconfig", type=Path, help="default: $KUBECONFIG or ~/.kube/config")
    command.add_argument("--context", help="the kubeconfig context to use (default: current)")
    command.add_argument("-n", "--namespace", help="default: the context's namespace")
    command.add_argument("--catalog", type=Path, help="TPU catalog file extending the packaged one")


def _audit_command(audit: argparse.ArgumentParser) -> None:
    _connection_flags(audit)
    audit.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    audit.add_argument(
        "--policy-reports",
        action="store_true",
        help="write a wgpolicyk8s.io PolicyReport per namespace (replaced on each run)",
    )
    audit.add_argument("-o", "--output", choices=["table", "wide", "json", "yaml"], default="table")
    audit.set_defaults(run=lambda args: _live("run_audit", args))


def _why_command(why: argparse.ArgumentParser) -> None:
    why.add_argument("name", help="pod/NAME, job/NAME, jobset/NAME, leaderworkerset/NAME...; "
                     "a bare NAME is a Pod")  # fmt: skip
    _connection_flags(why)
    why.set_defaults(run=lambda args: _live("run_why", args))


def _live(command: str, args: argparse.Namespace) -> int:
    """A command on a live cluster; what keeps it from the cluster is one line, exit 2."""
    from urllib3.exceptions import HTTPError

    from webhook import live
    from webhook.certificates.kubeapi import ApiError
    from webhook.settings import StartupError

    try:
        return int(getattr(live, command)(args))
    except (live.ClusterError, StartupError, ApiError) as error:
        print(f"error: {error}", file=sys.stderr)
    except HTTPError as error:
        print(f"error: cannot reach the API server: {error}", file=sys.stderr)
    return EXIT_UNREADABLE


def _serve(args: argparse.Namespace) -> int:
    from webhook.serving.server import serve
    from webhook.settings import Settings, StartupError

    given = {k: v for k, v in vars(args).items() if k != "run" and v is not None}
    try:
        return serve(Settings(**given))
    except (ValidationError, StartupError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_UNREADABLE


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


def _admit_all(args: argparse.Namespace) -> list[Result]:
    catalog = load_catalog(args.catalog)
    given = [found for source in args.filename for found in read_objects(source, warn=_warn)]
    held = [obj for source in args.cluster_objects for _, obj in read_objects(source, warn=_warn)]
    read = set(CLUSTER_KINDS) if args.cluster_objects else set()
    offer = OfferPolicy(tuple(_declared(d) for d in args.offered), args.enforce_offered)
    view = view_for(catalog, [*held, *(obj for _, obj in given)], read, offer)
    policy = Policy(catalog, Options(profile=args.profile), cluster=Cluster(view))
    results = []
    for origin, obj in given:
        try:
            results.append(admit(obj, policy))
        except RecursionError:  # a value nested where a TPU field belongs
            meta = obj.get("metadata")
            name = meta.get("name", "") if isinstance(meta, dict) else ""
            raise ManifestError(
                f"{origin}: {obj.get('kind')}/{name}: a field tpu-webhook reads nests too "
                "deeply (the API server would refuse this object)"
            ) from None
    return results


def _declared(given: str) -> Declared:
    """`tpu-v6e-slice=2x4,8x8` (or `tpu-v6e-slice`: any topology)."""
    accelerator, _, topologies = given.partition("=")
    if not accelerator:
        raise ManifestError(f"--offered {given}: name an accelerator, e.g. tpu-v6e-slice=2x4")
    return Declared(accelerator.strip(), tuple(t.strip() for t in topologies.split(",") if t))


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _check(args: argparse.Namespace) -> int:
    results = _admit_all(args)
    if args.output == "text":
        print(verdicts_text(results), end="")
    else:
        print(dump([[r.as_json() for r in results]], args.output), end="")
    return EXIT_DENIED if any(not r.allowed for r in results) else EXIT_OK


def _render(args: argparse.Namespace) -> int:
    results = _admit_all(args)
    for r in results:
        for v in r.denials:
            print(f"# {r.kind}/{r.name}: denied [{v.code}] {v.message}", file=sys.stderr)
    stored = [r.stored for r in results]
    print(dump([kubectl_list(stored)] if args.output == "json" else stored, args.output), end="")
    return EXIT_DENIED if any(not r.allowed for r in results) else EXIT_OK


def _rules(args: argparse.Namespace) -> int:
    chosen = list(RULES)
    if args.code is not None:
        rule = BY_CODE.get(args.code)
        if rule is None:
            print(f"error: no rule {args.code}; `tpu-webhook rules` lists them", file=sys.stderr)
            return EXIT_UNREADABLE
        chosen = [rule]
    if args.output != "text":
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
        print(dump([rows], args.output), end="")
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
    if args.topology is None:
        shapes = [s for group in accelerator.shapes.values() for s in group]
    else:
        shapes = list(catalog.shapes(accelerator, args.topology))
        if not shapes:
            print(f"error: {accelerator.name} offers {accelerator.offered()}", file=sys.stderr)
            return EXIT_DENIED
    if args.output != "text":
        print(dump([accelerator_data(accelerator, shapes, args.kind)], args.output), end="")
        return EXIT_OK
    print(f"{accelerator.name} ({accelerator.generation})")
    for m in accelerator.machine_types:
        print(f"  machine type {m.name}: {m.chips} chips, {m.cpu_text} cpu, {m.memory_text} memory")
    if args.topology is None:
        print(f"  topologies: {accelerator.offered()}")
        for topology, group in list(accelerator.shapes.items())[:24]:
            print(f"    {topology}: " + "; ".join(s.describe().split(" = ", 1)[1] for s in group))
        return EXIT_OK
    for shape in shapes:
        print(f"  {shape.describe()}")
    print(dump(example_manifests(shapes[-1], args.kind), "yaml"), end="")
    return EXIT_OK
