"""Write the audit's PolicyReports (report.py decides what) through the Kubernetes API.

Idempotent: the stored reports labelled as tpu-webhook's are read first, then each is created,
replaced (carrying the resourceVersion read: a report changed since is read again and replaced
once more) or deleted. A write the API server refuses (a namespace being deleted, a missing
permission) is one line in the problems returned; the other reports are still written.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from webhook.audit import report
from webhook.audit.verdicts import Audited
from webhook.certificates.kubeapi import ApiError, Conflict, KubeApi


class ReportsUnavailable(Exception):
    """The cluster does not serve PolicyReports (their CRD is not installed)."""


def publish(
    api: KubeApi, audited: Iterable[Audited], namespace: str | None, seconds: int
) -> list[str]:
    """Make the stored reports of `namespace` (None: every namespace and the cluster's) those of
    `audited`; the problems, one line each. Raises ReportsUnavailable."""
    wanted = report.reports(audited, seconds)
    if namespace is not None:
        wanted = {ns: body for ns, body in wanted.items() if ns == namespace}
    existing: list[dict[str, Any]] = []
    for path in report.list_paths(namespace):
        try:
            existing += api.list_all(path, label_selector=report.SELECTOR)
        except ApiError as error:
            if error.status == 404:
                raise ReportsUnavailable(
                    f"the cluster does not serve {report.GROUP_VERSION} PolicyReports: install "
                    "their CRDs (kubernetes-sigs/wg-policy-prototypes, or Kyverno's)"
                ) from None
            raise
    problems = []
    for action in report.plan(wanted, existing):
        try:
            _write(api, action)
        except ApiError as error:
            problems.append(f"{action.write} {action.path}: {str(error).partition(': ')[2]}")
    return problems


def _write(api: KubeApi, action: report.Action) -> None:
    if action.write == "delete":
        try:
            api.delete(action.path)
        except ApiError as error:
            if error.status != 404:  # gone already: what was wanted
                raise
        return
    assert action.body is not None
    try:
        if action.write == "create":
            api.create(action.path, action.body)
        else:
            api.replace(action.path, action.body)
        return
    except Conflict:  # created or changed since it was read (another audit): once more
        pass
    metadata = action.body["metadata"]
    path = report.path_of(str(metadata.get("namespace", "")))
    version = api.get(path).get("metadata", {}).get("resourceVersion", "")
    api.replace(path, {**action.body, "metadata": {**metadata, "resourceVersion": version}})
