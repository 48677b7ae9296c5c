"""The chart in selfManaged certificate mode, with the real helm binary (no cluster): the render is
the same every time (what GitOps tools need), the Secret is rendered empty, and the RBAC names
exactly the Secret and the two webhook configurations. The mode against a real API server:
tests/e2e/test_cert_self_managed.py and tests/e2e/test_cert_node.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

from tests.chart.test_chart_render import (
    CHART,
    FULLNAME,
    NAMESPACE,
    Manifest,
    container,
    env_of,
    kinds,
    only,
    rbac,
    render,
    template,
    webhooks,
)
from webhook.settings import Settings

pytestmark = pytest.mark.helm

VALUES = CHART / "ci" / "self-managed-values.yaml"
SECRET = f"{FULLNAME}-certs"
CA_SECRET = f"{FULLNAME}-ca-bundle"
RBAC = {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


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


def self_managed(env: Mapping[str, str], **sets: str) -> list[Manifest]:
    return render(env, VALUES, sets=sets)


def test_every_render_is_the_same_so_a_gitops_re_apply_changes_nothing(
    helm_env: dict[str, str],
) -> None:
    first, second = (template(helm_env, VALUES) for _ in range(2))
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout
    # The selfSigned default, for contrast: every render makes a new CA.
    default = [template(helm_env).stdout for _ in range(2)]
    assert default[0] != default[1]


def test_no_ca_bundle_and_no_certificate_is_rendered(helm_env: dict[str, str]) -> None:
    docs = self_managed(helm_env)
    assert all("caBundle" not in entry["clientConfig"] for entry in webhooks(docs).values())
    secrets = [d for d in docs if d["kind"] == "Secret"]
    # The certificate Secret and the CA-only Secret, both filled by the server.
    assert [s["metadata"]["name"] for s in secrets] == [CA_SECRET, SECRET]
    for secret in secrets:
        assert secret["type"] == "Opaque"  # a kubernetes.io/tls Secret cannot be empty
        assert "data" not in secret
        assert "stringData" not in secret


def test_rbac_names_exactly_its_secret_and_its_two_configurations(
    helm_env: dict[str, str],
) -> None:
    docs = rbac(self_managed(helm_env))  # beyond the read-only cluster objects' own
    assert sorted(d["kind"] for d in docs) == sorted(RBAC)
    role = only(docs, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [SECRET, CA_SECRET],
            "verbs": ["get", "patch"],
        }
    ]
    assert only(docs, "ClusterRole")["rules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": [resource],
            "resourceNames": [FULLNAME],
            "verbs": ["get", "patch"],
        }
        for resource in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    ]
    subject = {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    for kind, role_kind in (("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")):
        binding = only(docs, kind)
        assert binding["subjects"] == [subject]
        assert binding["roleRef"]["kind"] == role_kind
        assert binding["roleRef"]["name"] == f"{FULLNAME}-certificates"


def test_only_the_enabled_configuration_is_granted_and_managed(helm_env: dict[str, str]) -> None:
    docs = self_managed(helm_env, **{"webhook.mutating.enabled": "false"})
    (rule,) = only(rbac(docs), "ClusterRole")["rules"]
    assert rule["resources"] == ["validatingwebhookconfigurations"]
    env = env_of(docs)
    assert "TPU_WEBHOOK_CERT_MUTATING_CONFIGURATION" not in env
    assert env["TPU_WEBHOOK_CERT_VALIDATING_CONFIGURATION"] == FULLNAME


def test_the_token_is_mounted_and_the_certificate_is_not(helm_env: dict[str, str]) -> None:
    docs = self_managed(helm_env)
    assert only(docs, "ServiceAccount")["automountServiceAccountToken"] is True
    pod = only(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    assert [v["name"] for v in pod["volumes"]] == ["tmp"]
    assert [m["name"] for m in container(docs)["volumeMounts"]] == ["tmp"]
    default = render(helm_env, sets={"clusterObjects.enabled": "false"})
    assert only(default, "ServiceAccount")["automountServiceAccountToken"] is False
    assert not kinds(default) & RBAC


def test_the_server_is_told_its_secret_names_and_timings(
    helm_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = env_of(self_managed(helm_env))
    assert {k: v for k, v in env.items() if k.startswith("TPU_WEBHOOK_CERT_")} == {
        "TPU_WEBHOOK_CERT_SECRET": SECRET,
        "TPU_WEBHOOK_CERT_SECRET_NAMESPACE": NAMESPACE,
        "TPU_WEBHOOK_CERT_CA_SECRET": CA_SECRET,
        "TPU_WEBHOOK_CERT_SERVICE": FULLNAME,
        "TPU_WEBHOOK_CERT_MUTATING_CONFIGURATION": FULLNAME,
        "TPU_WEBHOOK_CERT_VALIDATING_CONFIGURATION": FULLNAME,
        "TPU_WEBHOOK_CERT_CA_VALIDITY_DAYS": "365",
        "TPU_WEBHOOK_CERT_VALIDITY_DAYS": "30",  # ci/self-managed-values.yaml
        "TPU_WEBHOOK_CERT_SYNC_SECONDS": "10",
        "TPU_WEBHOOK_CERT_PROPAGATION_SECONDS": "60",
        "TPU_WEBHOOK_CERT_OVERLAP_SECONDS": "600",
    }
    assert "TPU_WEBHOOK_TLS_CERT_FILE" not in env
    given = {k.removeprefix("TPU_WEBHOOK_").lower(): v for k, v in env.items()}
    assert set(given) <= set(Settings.model_fields)
    for name, value in env.items():  # the server reads them from its environment
        monkeypatch.setenv(name, value)
    settings = Settings()  # and accepts them as they are
    assert settings.cert_secret == SECRET
    assert settings.cert_ca_secret == CA_SECRET
    assert settings.cert_validity_days == 30


def test_a_secret_name_can_be_given(helm_env: dict[str, str]) -> None:
    docs = self_managed(helm_env, **{"certificates.secretName": "webhook-certs"})
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"] == [
        CA_SECRET,
        "webhook-certs",
    ]
    assert only(docs, "Role")["rules"][0]["resourceNames"] == ["webhook-certs", CA_SECRET]
    assert env_of(docs)["TPU_WEBHOOK_CERT_SECRET"] == "webhook-certs"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("certificates.selfManaged.syncSeconds", "0"),
        ("certificates.selfManaged.caValidityDays", "-1"),
        ("certificates.selfManaged.overlapSeconds", "-5"),
        ("certificates.selfManaged.renewBefore", "1"),
    ],
)
def test_schema_rejects_bad_self_managed_values(
    helm_env: dict[str, str], key: str, value: str
) -> None:
    proc = template(helm_env, VALUES, sets={key: value})
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr
