"""The chart's certificates, rendered by the real helm binary (no cluster): the selfSigned pair
(ECDSA P-256, its lifetime recorded on the Secret for a renewal at upgrade) and the selfManaged
guard (a ValidatingAdmissionPolicy). Against a real API server: the renewal by `helm upgrade` in
tests/chart/test_chart_install.py, the guard in tests/e2e/test_cert_self_managed.py.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from tests.chart.test_chart_render import (
    CHART,
    FULLNAME,
    NAMESPACE,
    Manifest,
    kinds,
    only,
    render,
    template,
    verify_signed_by,
)

pytestmark = pytest.mark.helm

CI = CHART / "ci"
LAYOUT = "%Y-%m-%dT%H:%M:%SZ"


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


def secrets(docs: Sequence[Manifest]) -> dict[str, Manifest]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}


def pem_bundle(secret: Manifest) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(base64.b64decode(secret["data"]["ca.crt"]))


def annotation_time(secret: Manifest, key: str) -> dt.datetime:
    text = secret["metadata"]["annotations"][key]
    return dt.datetime.strptime(text, LAYOUT).replace(tzinfo=dt.UTC)


# ---------------------------------------------------------------- the selfSigned pair


@pytest.mark.parametrize(("sets", "days"), [({}, 365), ({"validityDays": "30"}, 30)])
def test_the_self_signed_pair_is_ecdsa_p256_valid_for_validity_days_as_its_annotations_say(
    helm_env: dict[str, str], sets: dict[str, str], days: int
) -> None:
    values = {f"certificates.selfSigned.{k}": v for k, v in sets.items()}
    docs = render(helm_env, sets=values)
    tls = secrets(docs)[f"{FULLNAME}-tls"]
    (ca,) = pem_bundle(tls)
    leaf = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["tls.crt"]))
    verify_signed_by(leaf, ca)
    for certificate in (ca, leaf):
        key = certificate.public_key()
        assert isinstance(key, ec.EllipticCurvePublicKey)
        assert key.curve.name == "secp256r1"
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    not_before = annotation_time(tls, "tpu-webhook.io/not-before")
    not_after = annotation_time(tls, "tpu-webhook.io/not-after")
    assert not_after - not_before == dt.timedelta(days=days)
    for certificate in (ca, leaf):  # the annotations say what the certificates say
        assert abs(certificate.not_valid_before_utc - not_before) < dt.timedelta(seconds=5)
        assert abs(certificate.not_valid_after_utc - not_after) < dt.timedelta(seconds=5)
    assert "tpu-webhook.io/previous-ca-not-after" not in tls["metadata"]["annotations"]


# ------------------------------------------------------------ the selfManaged guard


def guard(docs: Sequence[Manifest]) -> tuple[Manifest, Manifest]:
    return only(docs, "ValidatingAdmissionPolicy"), only(docs, "ValidatingAdmissionPolicyBinding")


def test_self_managed_mode_ships_the_ca_bundle_guard_for_its_service_account(
    helm_env: dict[str, str],
) -> None:
    policy, binding = guard(render(helm_env, CI / "self-managed-values.yaml"))
    name = f"{FULLNAME}-ca-bundle-only"
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == name
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
            "resourceNames": [FULLNAME],
        }
    ]
    assert spec["matchConditions"] == [
        {
            "name": "by-the-server-service-account",
            "expression": (
                f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{FULLNAME}'"
            ),
        }
    ]
    assert [v.get("reason") for v in spec["validations"]] == ["Forbidden", "Forbidden"]
    assert [v["message"].split(":")[0] for v in spec["validations"]] == ["webhooks", "metadata"]


@pytest.mark.parametrize(
    ("sets", "username", "resources"),
    [
        (
            {"serviceAccount.create": "false", "serviceAccount.name": "webhook"},
            f"system:serviceaccount:{NAMESPACE}:webhook",
            ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
        ),
        (
            {"webhook.mutating.enabled": "false"},
            f"system:serviceaccount:{NAMESPACE}:{FULLNAME}",
            ["validatingwebhookconfigurations"],
        ),
    ],
)
def test_the_guard_follows_the_service_account_and_the_configurations_rendered(
    helm_env: dict[str, str], sets: dict[str, str], username: str, resources: list[str]
) -> None:
    policy, _ = guard(render(helm_env, CI / "self-managed-values.yaml", sets=sets))
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == '{username}'"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == resources


@pytest.mark.parametrize(
    ("values", "sets"),
    [
        (CI / "self-managed-values.yaml", {"certificates.selfManaged.guard.enabled": "false"}),
        (CI / "default-values.yaml", {}),
        (CI / "cert-manager-values.yaml", {}),
        (CI / "existing-secret-values.yaml", {}),
    ],
    ids=["guard-disabled", "self-signed", "cert-manager", "existing-secret"],
)
def test_no_guard_where_the_server_has_no_api_access_or_it_is_off(
    helm_env: dict[str, str], values: Path, sets: Mapping[str, str]
) -> None:
    docs = render(helm_env, values, sets=dict(sets))
    assert not kinds(docs) & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def test_schema_rejects_a_guard_switch_that_is_not_a_boolean(helm_env: dict[str, str]) -> None:
    sets = {"certificates.selfManaged.guard.enabled": "yes"}
    proc = template(helm_env, CI / "self-managed-values.yaml", sets=sets)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr
