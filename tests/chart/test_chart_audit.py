"""The chart's `audit` values: the server audits periodically with exactly the permissions the
audit uses (`list` on the kinds of the workload table, read/write on PolicyReports)."""

from __future__ import annotations

import os

import pytest

from tests.chart.test_chart_render import CHART, NAMESPACE, container, only, render
from webhook.audit.report import GROUP_VERSION
from webhook.policy.workloads import WORKLOADS

pytestmark = pytest.mark.helm

AUDIT = CHART / "ci" / "audit-values.yaml"


@pytest.fixture(scope="module")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """helm with its own state dirs and no kubeconfig: template never touches a cluster."""
    home = tmp_path_factory.mktemp("helm-home")
    return {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "KUBECONFIG": str(home / "no-kubeconfig"),
    }


def test_audit_lists_the_workload_kinds_and_writes_only_policy_reports(
    helm_env: dict[str, str],
) -> None:
    docs = render(helm_env, AUDIT)
    (role,) = [
        d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-audit")
    ]
    listed = {
        (g, r) for rule in role["rules"][:-1] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert listed == {(w.group, w.resource) for w in WORKLOADS.values()}
    assert {v for rule in role["rules"][:-1] for v in rule["verbs"]} == {"list"}
    assert role["rules"][-1] == {
        "apiGroups": [GROUP_VERSION.split("/")[0]],
        "resources": ["policyreports", "clusterpolicyreports"],
        "verbs": ["get", "list", "create", "update", "patch", "delete"],
    }
    (binding,) = [
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] == role["metadata"]["name"]
    ]
    account = only(docs, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]
    env = {e["name"]: e.get("value") for e in container(docs)["env"]}
    assert env["TPU_WEBHOOK_AUDIT_INTERVAL_SECONDS"] == "600"


@pytest.mark.parametrize("sets", [{}, {"clusterObjects.enabled": "false"}])
def test_audit_off_grants_nothing_and_sets_no_interval(
    helm_env: dict[str, str], sets: dict[str, str]
) -> None:
    docs = render(helm_env, sets=sets)
    assert [d for d in docs if d["metadata"]["name"].endswith("-audit")] == []
    assert "TPU_WEBHOOK_AUDIT_INTERVAL_SECONDS" not in {e["name"] for e in container(docs)["env"]}


def test_audit_alone_mounts_the_token(helm_env: dict[str, str]) -> None:
    docs = render(helm_env, AUDIT, sets={"clusterObjects.enabled": "false"})
    assert only(docs, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"]
    assert only(docs, "ServiceAccount")["automountServiceAccountToken"]
