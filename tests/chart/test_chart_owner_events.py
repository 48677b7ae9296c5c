"""The chart's ownerEvents: the server may create and patch Events, and read the owners up a
controller-made object's chain, exactly the kinds the walk reads (webhook/serving/ownerchain.py)."""

from __future__ import annotations

import pytest

from tests.chart.test_chart_render import (
    NAMESPACE,
    Manifest,
    env_of,
    helm_env,
    kinds,
    only,
    render,
)
from webhook.serving.ownerchain import OWNER_RESOURCES

pytestmark = pytest.mark.helm

__all__ = ["helm_env"]  # the module's fixture: helm with its own state, no cluster
RBAC = {"ClusterRole", "ClusterRoleBinding"}


def owner_events(docs: list[Manifest]) -> list[Manifest]:
    return [d for d in docs if d["metadata"]["name"].endswith("-owner-events")]


def test_the_role_creates_and_patches_events_and_gets_exactly_the_walked_kinds(
    helm_env: dict[str, str],
) -> None:
    docs = render(helm_env)
    role = only(owner_events(docs), "ClusterRole")
    events, *reads = role["rules"]
    assert events == {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}
    assert {rule["verbs"] == ["get"] for rule in reads} == {True}
    granted = {
        (group, r) for rule in reads for group in rule["apiGroups"] for r in rule["resources"]
    }
    walked = {(group, resource) for (group, _), resource in OWNER_RESOURCES.items()}
    assert granted == walked
    binding = only(owner_events(docs), "ClusterRoleBinding")
    account = only(docs, "ServiceAccount")["metadata"]["name"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]
    assert env_of(docs)["TPU_WEBHOOK_OWNER_EVENTS"] == "true"


@pytest.mark.parametrize(
    "sets",
    [{"ownerEvents.enabled": "false"}, {"clusterObjects.enabled": "false"}],
    ids=["off", "without the cluster objects' token"],
)
def test_off_no_role_and_the_server_is_told(helm_env: dict[str, str], sets: dict[str, str]) -> None:
    docs = render(helm_env, sets=sets)
    assert not kinds(owner_events(docs)) & RBAC
    assert env_of(docs)["TPU_WEBHOOK_OWNER_EVENTS"] == "false"
