"""The CLI's commands on a live cluster: `audit` and `why`. They connect as kubectl does
(kubeconfig, context, its namespace), build the cluster view the server builds (the cluster
watcher's one pass), fetch, and hand plain objects to the pure modules (webhook/audit,
webhook/why); this module only fetches and prints."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from typing import Any

from webhook.admission.dispatch import Cluster, Policy
from webhook.audit.collect import collect, list_path
from webhook.audit.publish import ReportsUnavailable, publish
from webhook.audit.table import table
from webhook.audit.verdicts import audit
from webhook.catalog import load_catalog
from webhook.certificates.kubeapi import ApiError, KubeApi
from webhook.output import dump
from webhook.policy.cluster import ClusterView
from webhook.policy.decide import Options
from webhook.serving.clusterwatch import ClusterWatch
from webhook.why import explain, facts, names
from webhook.why.explain import Evidence

EXIT_OK, EXIT_DENIED, EXIT_UNREADABLE = 0, 1, 2
PODS_READ = 3  # Pods whose Events `why` reads, of a workload's Pods not running or waiting


class ClusterError(Exception):
    """The cluster cannot be read (kubeconfig, connection, API): one line, exit status 2."""


def run_audit(args: argparse.Namespace) -> int:
    api, policy = _connect(args)
    namespace = None if args.all_namespaces else (args.namespace or api.namespace)
    found = collect(api, policy, namespace)
    for problem in found.problems:
        print(f"warning: {problem}", file=sys.stderr)
    if args.policy_reports:
        try:
            problems = publish(api, found.audited, namespace, int(time.time()))
        except ReportsUnavailable as error:
            raise ClusterError(str(error)) from None
        for problem in problems:
            print(f"warning: PolicyReport not written: {problem}", file=sys.stderr)
    if args.output in ("json", "yaml"):
        print(dump([[a.as_json() for a in found.audited]], args.output), end="")
    elif not found.audited:
        where = "" if namespace is None else f" in {namespace} namespace"
        print(f"No TPU workloads found{where}.", file=sys.stderr)
    else:
        print(table(found.audited, namespace is None, wide=args.output == "wide"), end="")
    denied = any(a.verdict == "denied" for a in found.audited)
    return EXIT_DENIED if denied else EXIT_OK


def run_why(args: argparse.Namespace) -> int:
    try:
        workload, name = names.resolve(args.name)
    except names.UnknownKind as error:
        raise ClusterError(str(error)) from None
    api, policy = _connect(args)
    namespace = args.namespace or api.namespace
    try:
        obj = api.get(f"{list_path(workload, namespace)}/{name}")
    except ApiError as error:
        if error.status != 404:
            raise
        resource = workload.resource + (f".{workload.group}" if workload.group else "")
        print(f'Error from server (NotFound): {resource} "{name}" not found', file=sys.stderr)
        return EXIT_DENIED
    obj.setdefault("apiVersion", f"{workload.group}/{workload.version}".lstrip("/"))
    obj.setdefault("kind", workload.kind)
    pods = (
        [obj]
        if workload.kind == "Pod"
        else _pods(api, namespace, names.pod_selector(workload, obj))
    )
    stuck = [p for p in pods if p is not obj and (facts.waiting(p) or _phase(p) != "Running")]
    about = [(workload.kind, name), *(("Pod", _name(p)) for p in stuck[:PODS_READ])]
    events = [e for kind, n in about for e in _events(api, namespace, kind, n)]
    evidence = Evidence(
        workload.kind,
        obj,
        audit(obj, policy),
        offered_shapes(policy.cluster.view, namespace),
        tuple(pods),
        tuple(events),
        dt.datetime.now(dt.UTC),
    )
    print("\n".join(explain.explain(evidence)))
    return EXIT_OK


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _phase(obj: dict[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase", ""))


def offered_shapes(view: ClusterView, namespace: str) -> tuple[str, ...] | None:
    """The shapes the view says the cluster offers to `namespace`, one line each; None when
    nothing says (no source read, or every pool at zero)."""
    if not view.offered.known:
        return None
    return tuple(view.offered.describe(namespace).split("; "))


def _connect(args: argparse.Namespace) -> tuple[KubeApi, Policy]:
    catalog = load_catalog(args.catalog)
    api = KubeApi.from_kubeconfig(args.kubeconfig, args.context)
    view = ClusterWatch(api, Cluster(), catalog).sync()
    return api, Policy(catalog, Options(profile="detect"), cluster=Cluster(view))


def _pods(api: KubeApi, namespace: str, selector: str) -> list[dict[str, Any]]:
    if not selector:
        return []
    path = f"/api/v1/namespaces/{namespace}/pods"
    return api.list_all(path, label_selector=selector)


def _events(api: KubeApi, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={name},involvedObject.kind={kind}"
    path = f"/api/v1/namespaces/{namespace}/events"
    return api.list_all(path, field_selector=selector)
