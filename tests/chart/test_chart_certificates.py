"""The chart's certificates, rendered by the real helm binary (no cluster): the selfSigned pair
(ECDSA P-256, its lifetime recorded on the Secret for a renewal at upgrade), the CA-only Secret,
that no Role lets anybody but the server read a Secret holding a private key, and the
selfManaged guard (a ValidatingAdmissionPolicy). Against a real API server: the renewal by
`helm upgrade` in tests/chart/test_chart_install.py, the guard and the server writing the
CA-only Secret in tests/e2e/test_cert_self_managed.py.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from ruamel.yaml import YAML

from tests.chart.test_chart_render import (
    CHART,
    FULLNAME,
    NAMESPACE,
    Manifest,
    env_of,
    kinds,
    only,
    render,
    template,
    verify_signed_by,
    webhooks,
)

pytestmark = pytest.mark.helm

CA_SECRET = f"{FULLNAME}-ca-bundle"
SERVER = {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
LAYOUT = "%Y-%m-%dT%H:%M:%SZ"
CI = CHART / "ci"
MONITORED = {"metrics.podMonitoring.enabled": "true", "metrics.serviceMonitor.enabled": "true"}
#: certManager has no CA-only Secret: the collector's CA must be named.
CORP_CA = {
    "metrics.podMonitoring.tls.serverName": f"{FULLNAME}.{NAMESPACE}.svc",
    "metrics.podMonitoring.tls.ca.secret.name": "corp-ca",
    "metrics.podMonitoring.tls.ca.secret.key": "ca.crt",
}
#: The TLS Secret of ci/existing-secret-values.yaml (made outside the chart, with its key).
EXISTING = YAML(typ="safe").load((CI / "existing-secret-values.yaml").read_text())["certificates"][
    "existingSecret"
]["name"]
MODES = {
    "selfSigned": (CI / "default-values.yaml", {}),
    "selfManaged": (CI / "self-managed-values.yaml", {}),
    "existingSecret": (CI / "existing-secret-values.yaml", {}),
    "certManager": (CI / "cert-manager-values.yaml", CORP_CA),
}


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


def test_the_self_signed_ca_only_secret_holds_the_ca_bundle_and_no_key(
    helm_env: dict[str, str],
) -> None:
    docs = render(helm_env)
    tls, ca_only = secrets(docs)[f"{FULLNAME}-tls"], secrets(docs)[CA_SECRET]
    assert ca_only["type"] == "Opaque"
    assert ca_only["data"] == {"ca.crt": tls["data"]["ca.crt"]}
    assert {e["clientConfig"]["caBundle"] for e in webhooks(docs).values()} == {
        tls["data"]["ca.crt"]
    }


def test_existing_secret_mode_renders_the_given_ca_as_the_ca_only_secret(
    helm_env: dict[str, str],
) -> None:
    docs = render(helm_env, CI / "existing-secret-values.yaml")
    ca_only = secrets(docs)[CA_SECRET]
    assert ca_only["data"] == {
        "ca.crt": next(iter(webhooks(docs).values()))["clientConfig"]["caBundle"]
    }
    assert len(pem_bundle(ca_only)) == 1


def test_cert_manager_mode_renders_no_ca_only_secret(helm_env: dict[str, str]) -> None:
    assert CA_SECRET not in secrets(render(helm_env, CI / "cert-manager-values.yaml"))


# ------------------------------------------------------- who may read a key-holding Secret


def key_secrets(docs: Sequence[Manifest]) -> set[str]:
    """Secrets of the release that hold a private key: rendered with one, written by
    cert-manager (every Certificate's Secret), mounted by the server (its TLS pair), or written
    by the server (selfManaged)."""
    names = {
        name
        for name, s in secrets(docs).items()
        if {"tls.key", "ca.key"} & set(s.get("data") or {})
    }
    names |= {d["spec"]["secretName"] for d in docs if d["kind"] == "Certificate"}
    volumes = only(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    names |= {v["secret"]["secretName"] for v in volumes if "secret" in v}
    names |= {v for k, v in env_of(docs).items() if k == "TPU_WEBHOOK_CERT_SECRET"}
    return names


def secret_grants(docs: Sequence[Manifest]) -> Iterator[tuple[list[Manifest], list[str] | None]]:
    """(subjects, resourceNames or None for every Secret) of each binding's rules on Secrets."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"].endswith("Role")}
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            if {"secrets", "*"} & set(rule["resources"]) and {"", "*"} & set(rule["apiGroups"]):
                yield binding["subjects"], rule.get("resourceNames")


@pytest.mark.parametrize("mode", MODES)
def test_no_role_lets_anybody_but_the_server_read_a_secret_holding_a_key(
    helm_env: dict[str, str], mode: str
) -> None:
    values, sets = MODES[mode]
    docs = render(helm_env, values, sets={**MONITORED, **sets})
    keys = key_secrets(docs)
    assert keys  # every mode has one: the check below can fail
    others = [(s, names) for s, names in secret_grants(docs) if s != [SERVER]]
    assert others  # the managed collector's grant is among them
    for subjects, names in others:
        assert names, f"{subjects} may read every Secret"
        assert not keys & set(names), f"{subjects} may read {keys & set(names)}"
        for name in set(names) & set(secrets(docs)):  # what the chart renders there: ca.crt only
            assert set(secrets(docs)[name].get("data") or {}) <= {"ca.crt"}


@pytest.mark.parametrize("mode", ["selfSigned", "selfManaged", "existingSecret"])
def test_the_collector_and_the_service_monitor_read_the_ca_only_secret(
    helm_env: dict[str, str], mode: str
) -> None:
    values, sets = MODES[mode]
    docs = render(helm_env, values, sets={**MONITORED, **sets})
    (grant,) = [names for s, names in secret_grants(docs) if s != [SERVER]]
    assert grant == [CA_SECRET]
    (scrape,) = only(docs, "PodMonitoring")["spec"]["endpoints"]
    assert scrape["tls"]["ca"]["secret"] == {"name": CA_SECRET, "key": "ca.crt"}
    (endpoint,) = only(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": CA_SECRET, "key": "ca.crt"}


def test_cert_manager_mode_needs_the_collector_ca_named(helm_env: dict[str, str]) -> None:
    sets = {"metrics.podMonitoring.enabled": "true"}
    proc = template(helm_env, CI / "cert-manager-values.yaml", sets=sets)
    assert proc.returncode != 0
    assert (
        "metrics.podMonitoring.tls is required when certificates.mode is certManager: the "
        "managed collector reads the scrape's CA from a Secret the chart lets it get, and every "
        f"Secret of this mode holds a private key ({FULLNAME}-tls holds the serving key). Name a "
        "Secret with only ca.crt: --set "
        f"metrics.podMonitoring.tls.serverName={FULLNAME}.{NAMESPACE}.svc --set "
        "metrics.podMonitoring.tls.ca.secret.name=SECRET --set "
        "metrics.podMonitoring.tls.ca.secret.key=ca.crt"
    ) in proc.stderr
    docs = render(helm_env, CI / "cert-manager-values.yaml", sets={**sets, **CORP_CA})
    assert [names for _, names in secret_grants(docs)] == [["corp-ca"]]


@pytest.mark.parametrize(
    ("mode", "named", "rendered"),
    [
        ("selfSigned", f"{FULLNAME}-tls", f" (this release renders {CA_SECRET})"),
        ("selfManaged", f"{FULLNAME}-certs", f" (this release renders {CA_SECRET})"),
        ("existingSecret", EXISTING, f" (this release renders {CA_SECRET})"),
        ("certManager", f"{FULLNAME}-tls", ""),
        ("certManager", f"{FULLNAME}-ca", ""),  # the chart-made CA Issuer's Secret: the CA key
    ],
)
def test_naming_a_secret_that_holds_a_key_for_the_collector_fails(
    helm_env: dict[str, str], mode: str, named: str, rendered: str
) -> None:
    values, _ = MODES[mode]
    sets = {**CORP_CA, "metrics.podMonitoring.enabled": "true"}
    sets["metrics.podMonitoring.tls.ca.secret.name"] = named
    proc = template(helm_env, values, sets=sets)
    assert proc.returncode != 0
    assert (
        f"metrics.podMonitoring.tls.ca.secret.name: {named} holds a private key, and the chart "
        f"would let the managed collector get it; name a Secret with only ca.crt{rendered}"
    ) in proc.stderr


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
