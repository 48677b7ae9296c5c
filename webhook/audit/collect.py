"""List the TPU workloads stored in a cluster, kind by kind of the workload table, and decide
each as it is read (verdicts.py): a page of objects at a time in memory, only the verdicts kept.

A kind whose API the cluster does not serve (404: no such CRD, or a version it does not serve)
is skipped silently; any other refusal (403: the identity may not list it) is one line in
`problems`, and the other kinds are still read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from webhook.admission.dispatch import Policy
from webhook.audit.verdicts import Audited, audit
from webhook.certificates.kubeapi import ApiError, KubeApi
from webhook.policy.workloads import WORKLOADS, Workload

PAGE = 500  # objects listed per request


@dataclass
class Collected:
    audited: list[Audited] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line each, for stderr or the log
    listed: int = 0  # objects read, TPU or not


def list_path(workload: Workload, namespace: str | None) -> str:
    """`/apis/batch/v1/namespaces/ns/jobs`; every namespace when `namespace` is None."""
    root = f"/apis/{workload.group}/{workload.version}" if workload.group else "/api/v1"
    scope = f"/namespaces/{namespace}" if namespace is not None else ""
    return f"{root}{scope}/{workload.resource}"


def collect(
    api: KubeApi,
    policy: Policy,
    namespace: str | None,
    workloads: Iterable[Workload] = WORKLOADS.values(),
) -> Collected:
    """Every TPU workload of `namespace` (None: of every namespace) with its verdict, sorted as
    kubectl sorts a listing: by namespace, kind, name."""
    found = Collected()
    for workload in workloads:
        try:
            for page in api.pages(list_path(workload, namespace), PAGE):
                found.listed += len(page)
                found.audited += [a for obj in page if (a := audit(obj, policy)) is not None]
        except ApiError as error:
            if error.status != 404:
                where = f" in namespace {namespace}" if namespace is not None else ""
                message = str(error).partition(": ")[2] or str(error)
                found.problems.append(f"{workload.kind}s{where} not audited: {message}")
    found.audited.sort(key=lambda a: (a.namespace, a.kind, a.name))
    return found
