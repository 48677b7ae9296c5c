"""The Helm chart with the real helm binary (built by tests/tools, found by ``tools_dir()``).

Without a cluster: every ``ci/*-values.yaml`` passes ``helm lint --strict`` and renders; the
schema and the chart's own checks reject bad values; the rendered objects carry the fields the
design depends on. With the ``control_plane`` fixture (marked e2e): the real API server accepts
every rendered file, an install/upgrade keeps the self-signed CA, and the CEL matchConditions send
exactly the TPU workloads of every supported kind to the webhook.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from ruamel.yaml import YAML

from dev.chart import url_mode_configurations
from dev.controlplane import ControlPlane
from dev.processes import free_port
from dev.tools import REPO_ROOT, tools_dir
from tests.support.webhook_process import make_certs
from webhook.catalog import load_catalog
from webhook.policy.workloads import WORKLOADS
from webhook.registration import (
    ChartValues,
    rules,
    spec_changed_expression,
    tpu_match_expression,
    url_configurations,
)
from webhook.settings import Settings

CHART = REPO_ROOT / "charts" / "tpu-webhook"
CI_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
CI_IDS = [p.name.removesuffix("-values.yaml") for p in CI_FILES]
RELEASE = "tpu"
NAMESPACE = "tpu-system"
FULLNAME = "tpu-tpu-webhook"  # "<release>-<chart>"
WARN_LABEL = "tpu-webhook.io/mode"
OPT_OUT_LABEL = "tpu-webhook.io/ignore"
# Kinds that only exist where their operators installed CRDs; the test API server has none.
CRD_KINDS = {"ServiceMonitor", "PodMonitoring", "Certificate", "Issuer"}
EXPECTED_RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]},
    {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs", "cronjobs"]},
    {
        "apiGroups": ["apps"],
        "apiVersions": ["v1"],
        "resources": ["deployments", "daemonsets", "statefulsets"],
    },
    {"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"], "resources": ["jobsets"]},
    {
        "apiGroups": ["leaderworkerset.x-k8s.io"],
        "apiVersions": ["v1"],
        "resources": ["leaderworkersets"],
    },
    {
        "apiGroups": ["resource.k8s.io"],
        "apiVersions": ["v1"],
        "resources": ["resourceclaimtemplates", "resourceclaims"],
    },
    {
        "apiGroups": ["pathways-job.pathways.domain"],
        "apiVersions": ["v1"],
        "resources": ["pathwaysjobs"],
    },
    {
        "apiGroups": ["trainer.kubeflow.org"],
        "apiVersions": ["v1alpha1"],
        "resources": ["trainjobs"],
    },
    {
        "apiGroups": ["ray.io"],
        "apiVersions": ["v1"],
        "resources": ["rayclusters", "rayjobs", "rayservices"],
    },
]

Manifest = dict[str, Any]
pytestmark = pytest.mark.helm
#: An install must say where the image is (no public image is published): every render here
#: gives this unless a test overrides it.
REPOSITORY = "europe-docker.pkg.dev/example-project/tools/tpu-webhook"
BASE_SETS = {"image.repository": REPOSITORY}


# ----------------------------------------------------------------------------- helpers


@pytest.fixture(scope="session")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """helm with its own state dirs and no kubeconfig: lint/template never touch a cluster."""
    home = tmp_path_factory.mktemp("helm-home")
    env = dict(os.environ)
    env.update(
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
        KUBECONFIG=str(home / "no-kubeconfig"),
    )
    return env


def run_helm(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools_dir() / "helm"), *args],
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=60,
        check=False,
    )


def set_args(sets: Mapping[str, str]) -> list[str]:
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def values_args(values: Sequence[Path], sets: Mapping[str, str]) -> list[str]:
    return [a for v in values for a in ("-f", str(v))] + set_args(sets)


def template(
    env: Mapping[str, str],
    *values: Path,
    sets: Mapping[str, str] | None = None,
    namespace: str = NAMESPACE,
) -> subprocess.CompletedProcess[str]:
    args = values_args(values, {**BASE_SETS, **(sets or {})})
    return run_helm(env, "template", RELEASE, str(CHART), "-n", namespace, *args)


def parse(text: str) -> list[Manifest]:
    return [d for d in YAML(typ="safe", pure=True).load_all(text) if d]


def render(
    env: Mapping[str, str],
    *values: Path,
    sets: Mapping[str, str] | None = None,
    namespace: str = NAMESPACE,
) -> list[Manifest]:
    proc = template(env, *values, sets=sets, namespace=namespace)
    assert proc.returncode == 0, proc.stderr
    return parse(proc.stdout)


def only(docs: Sequence[Manifest], kind: str) -> Manifest:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def kinds(docs: Sequence[Manifest]) -> set[str]:
    return {d["kind"] for d in docs}


def webhooks(docs: Sequence[Manifest]) -> dict[str, Manifest]:
    """Every webhook entry of both configurations, by name."""
    entries: dict[str, Manifest] = {}
    for d in docs:
        if d["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            entries.update({w["name"]: w for w in d["webhooks"]})
    return entries


def ns_expressions(entry: Manifest) -> dict[str, tuple[str, list[str]]]:
    exprs = entry["namespaceSelector"]["matchExpressions"]
    return {e["key"]: (e["operator"], e["values"]) for e in exprs}


def container(docs: Sequence[Manifest]) -> Manifest:
    pod_spec = only(docs, "Deployment")["spec"]["template"]["spec"]
    (main,) = pod_spec["containers"]
    return dict(main)


def env_of(docs: Sequence[Manifest]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container(docs)["env"]}


def verify_signed_by(cert: x509.Certificate, ca: x509.Certificate) -> None:
    key = ca.public_key()
    assert cert.signature_hash_algorithm is not None
    if isinstance(key, rsa.RSAPublicKey):
        key.verify(
            cert.signature,
            cert.tbs_certificate_bytes,
            padding.PKCS1v15(),
            cert.signature_hash_algorithm,
        )
    else:
        assert isinstance(key, ec.EllipticCurvePublicKey)
        key.verify(
            cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm)
        )


# ---------------------------------------------------------------------- lint and render


@pytest.mark.parametrize("values", CI_FILES, ids=CI_IDS)
def test_ci_values_file_passes_strict_lint(helm_env: dict[str, str], values: Path) -> None:
    proc = run_helm(helm_env, "lint", "--strict", str(CHART), "-f", str(values))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("values", CI_FILES, ids=CI_IDS)
def test_ci_values_file_renders_both_webhook_configurations(
    helm_env: dict[str, str], values: Path
) -> None:
    docs = render(helm_env, values)
    assert {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= kinds(docs)
    assert set(webhooks(docs)) == {
        "mutate.tpu-webhook.io",
        "validate.tpu-webhook.io",
        "validate-update.tpu-webhook.io",
        "validate-warn.tpu-webhook.io",
    }


def test_there_is_a_ci_file_per_certificate_mode_and_for_url_and_monitoring() -> None:
    modes = {"default", "cert-manager", "existing-secret", "self-managed"}
    assert set(CI_IDS) >= {*modes, "url", "monitoring"}


RBAC = {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
# selfManaged certificates and the audit need RBAC of their own (test_chart_self_managed.py,
# test_chart_audit.py).
NO_API_USE = {"monitoring", "self-managed", "audit"}
NO_POD_MONITORING = [(p, i) for p, i in zip(CI_FILES, CI_IDS, strict=True) if i not in NO_API_USE]
# The server reads no cluster object (clusterObjects off): it then calls no API at all.
NO_CLUSTER_OBJECTS = {"clusterObjects.enabled": "false"}


def rbac(docs: Sequence[Manifest]) -> list[Manifest]:
    """The RBAC objects of a render, but the read-only cluster-objects ones and the owner-events
    ones (tested apart: tests/chart/test_chart_owner_events.py)."""
    apart = ("-cluster-objects", "-owner-events")
    return [d for d in docs if d["kind"] in RBAC and not d["metadata"]["name"].endswith(apart)]


@pytest.mark.parametrize(
    "values", [p for p, _ in NO_POD_MONITORING], ids=[i for _, i in NO_POD_MONITORING]
)
def test_no_rbac_without_a_pod_monitoring(helm_env: dict[str, str], values: Path) -> None:
    # Beyond reading the cluster objects and recording Events on owners, the server calls no
    # API: no other permission.
    assert rbac(render(helm_env, values)) == []
    assert not kinds(render(helm_env, values, sets=NO_CLUSTER_OBJECTS)) & RBAC


def test_cluster_objects_grant_only_reading_exactly_what_decisions_read(
    helm_env: dict[str, str],
) -> None:
    docs = render(helm_env, sets={"ownerEvents.enabled": "false"})  # its role alone
    role = only(docs, "ClusterRole")
    account = only(docs, "ServiceAccount")["metadata"]["name"]
    assert role["metadata"]["name"] == f"{account}-cluster-objects"
    assert role["rules"] == [
        {
            "apiGroups": ["cloud.google.com"],
            "resources": ["computeclasses"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["deviceclasses", "resourceclaimtemplates"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["trainer.kubeflow.org"],
            "resources": ["clustertrainingruntimes", "trainingruntimes"],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["resourceflavors"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    binding = only(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]
    env = {e["name"]: e.get("value") for e in container(docs)["env"]}
    assert (env["TPU_WEBHOOK_CLUSTER_OBJECTS"], env["TPU_WEBHOOK_CLUSTER_SYNC_SECONDS"]) == (
        "true",
        "30",
    )
    assert only(docs, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"]


@pytest.mark.parametrize(
    ("sets", "nodes", "flavors", "xpk"),
    [
        ({"offeredShapes.sources": "{computeClasses}"}, False, False, False),
        ({"offeredShapes.sources": "{nodes}"}, True, False, False),
        ({"offeredShapes.xpkConfigMap": "default/c-resources-configmap"}, True, True, True),
    ],
)
def test_each_offered_shapes_source_brings_its_own_reading_and_nothing_else(
    helm_env: dict[str, str], sets: dict[str, str], nodes: bool, flavors: bool, xpk: bool
) -> None:
    docs = render(helm_env, sets={"ownerEvents.enabled": "false", **sets})
    resources = {r for rule in only(docs, "ClusterRole")["rules"] for r in rule["resources"]}
    assert ("nodes" in resources, "resourceflavors" in resources) == (nodes, flavors)
    roles = [d for d in docs if d["kind"] == "Role"]
    assert [r["rules"] for r in roles] == (
        [
            [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": ["c-resources-configmap"],
                    "verbs": ["get"],
                }
            ]
        ]
        if xpk
        else []
    )


def test_pod_monitoring_lets_only_the_collector_read_only_the_ca_secret(
    helm_env: dict[str, str],
) -> None:
    docs = rbac(render(helm_env, CHART / "ci" / "monitoring-values.yaml"))
    assert sorted(d["kind"] for d in docs) == ["Role", "RoleBinding"]
    (role,) = [d for d in docs if d["kind"] == "Role"]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [f"{FULLNAME}-ca-bundle"],  # ca.crt alone, never the TLS Secret
            "verbs": ["get", "list", "watch"],
        }
    ]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "collector", "namespace": "gmp-system"}
    ]


def test_pod_monitoring_with_its_own_tls_settings_grants_nothing_without_a_ca_secret(
    helm_env: dict[str, str],
) -> None:
    sets = {"metrics.podMonitoring.tls.insecureSkipVerify": "true"}
    docs = render(helm_env, CHART / "ci" / "monitoring-values.yaml", sets=sets)
    assert rbac(docs) == []
    (scrape,) = only(docs, "PodMonitoring")["spec"]["endpoints"]
    assert scrape["tls"] == {"insecureSkipVerify": True}


def documented_values() -> dict[str, bool]:
    """Dotted path of every values.yaml key -> whether a '# --' comment documents it."""
    documented: dict[str, bool] = {}
    stack: list[tuple[int, str]] = []
    pending = False
    for line in (CHART / "values.yaml").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = True
            continue
        key = re.match(r"^( *)([A-Za-z0-9_]+):", line)
        if not key:
            continue
        indent = len(key.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key.group(2)))
        documented[".".join(k for _, k in stack)] = pending
        pending = False
    return documented


def test_every_value_is_documented_in_values_yaml_and_the_readme() -> None:
    documented = documented_values()
    readme = (CHART / "README.md").read_text()
    # A key is covered by its own '# --' comment or by a documented parent (e.g. resources).
    undocumented = [
        path
        for path in documented
        if not any(
            documented.get(".".join(path.split(".")[:n])) for n in range(1, path.count(".") + 2)
        )
        and not any(p.startswith(path + ".") for p in documented)
    ]
    assert undocumented == []
    missing = [p for p, doc in documented.items() if doc and f"| `{p}` |" not in readme]
    assert missing == []


# ------------------------------------------------------------------ rejected values


@pytest.mark.parametrize("command", ["lint", "template"])
def test_schema_rejects_an_unknown_key(helm_env: dict[str, str], command: str) -> None:
    extra = ["--strict"] if command == "lint" else [RELEASE]
    proc = run_helm(helm_env, command, *extra, str(CHART), "--set", "webhook.failurePolicyy=Fail")
    assert proc.returncode != 0
    assert "additional properties 'failurePolicyy' not allowed" in proc.stdout + proc.stderr


@pytest.mark.parametrize("command", ["lint", "template"])
def test_schema_rejects_a_wrong_type(helm_env: dict[str, str], command: str) -> None:
    extra = ["--strict"] if command == "lint" else [RELEASE]
    proc = run_helm(helm_env, command, *extra, str(CHART), "--set", "replicaCount=two")
    assert proc.returncode != 0
    assert "/replicaCount" in proc.stdout + proc.stderr
    assert "want integer" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("certificates.mode", "vault"),
        ("webhook.failurePolicy", "Retry"),
        ("webhook.validating.updateFailurePolicy", "Never"),
        ("webhook.exemptions.namespaces", "{Research}"),
        ("webhook.exemptions.optOutLabel", "maybe"),
        ("webhook.timeoutSeconds", "31"),
        ("image.pullPolicy", "Sometimes"),
        ("webhook.namespaceSelector.matchExpressions[0].operator", "Matches"),
    ],
)
def test_schema_rejects_values_outside_their_enum_or_range(
    helm_env: dict[str, str], key: str, value: str
) -> None:
    proc = template(helm_env, sets={key: value})
    assert proc.returncode != 0
    assert "/" + key.replace(".", "/").replace("[", "/").replace("]", "") in proc.stderr


def test_url_mode_without_acknowledgement_fails_with_an_explanation(
    helm_env: dict[str, str],
) -> None:
    proc = template(
        helm_env,
        CHART / "ci" / "url-values.yaml",
        sets={"webhook.url.iUnderstandThisIsForTesting": "false"},
    )
    assert proc.returncode != 0
    assert "it is for tests and development only" in proc.stderr
    assert "webhook.url.iUnderstandThisIsForTesting=true" in proc.stderr


def test_url_mode_needs_an_https_base(helm_env: dict[str, str]) -> None:
    url = CHART / "ci" / "url-values.yaml"
    proc = template(helm_env, url, sets={"webhook.url.base": "http://127.0.0.1:18443"})
    assert proc.returncode != 0
    assert "webhook.url.base must be an https:// URL" in proc.stderr


def test_existing_secret_without_ca_bundle_fails(helm_env: dict[str, str]) -> None:
    proc = template(
        helm_env,
        sets={"certificates.mode": "existingSecret", "certificates.existingSecret.name": "mine"},
    )
    assert proc.returncode != 0
    assert "certificates.existingSecret.caBundle" in proc.stderr
    assert "is required when certificates.mode is existingSecret" in proc.stderr


def test_existing_secret_without_name_fails(helm_env: dict[str, str]) -> None:
    values = CHART / "ci" / "existing-secret-values.yaml"
    proc = template(helm_env, values, sets={"certificates.existingSecret.name": ""})
    assert proc.returncode != 0
    assert "certificates.existingSecret.name is required" in proc.stderr


def test_a_base64_ca_bundle_is_rejected_as_not_pem(helm_env: dict[str, str]) -> None:
    values = CHART / "ci" / "existing-secret-values.yaml"
    b64 = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    proc = template(helm_env, values, sets={"certificates.existingSecret.caBundle": b64})
    assert proc.returncode != 0
    assert "certificates.existingSecret.caBundle must be a PEM certificate" in proc.stderr


def test_exemption_namespaces_with_another_opt_out_label_fail_with_the_reason(
    helm_env: dict[str, str],
) -> None:
    # the server decides the object label then, and it reads tpu-webhook.io/ignore
    sets = {"webhook.optOutLabel": "example.com/skip", "webhook.exemptions.namespaces[0]": "r"}
    proc = template(helm_env, sets=sets)
    assert proc.returncode != 0
    assert "the server reads the label tpu-webhook.io/ignore" in proc.stderr
    assert template(helm_env, sets={"webhook.optOutLabel": "example.com/skip"}).returncode == 0


def test_disabling_the_deployment_outside_url_mode_fails(helm_env: dict[str, str]) -> None:
    proc = template(helm_env, sets={"deployment.enabled": "false"})
    assert proc.returncode != 0
    assert "only allowed with webhook.url.enabled=true" in proc.stderr


# ------------------------------------------------------------------ the Deployment


def test_pod_runs_non_root_with_a_read_only_root_filesystem(helm_env: dict[str, str]) -> None:
    docs = render(helm_env)
    pod = only(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # the token only for the API calls it makes (reading the cluster objects, by default)
    assert pod["automountServiceAccountToken"] is True
    unused = only(render(helm_env, sets=NO_CLUSTER_OBJECTS), "Deployment")["spec"]["template"]
    assert unused["spec"]["automountServiceAccountToken"] is False
    sc = container(docs)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True


def test_termination_leaves_room_for_the_pre_stop_sleep_and_the_drain(
    helm_env: dict[str, str],
) -> None:
    from webhook.settings import Settings

    docs = render(helm_env)
    pod = only(docs, "Deployment")["spec"]["template"]["spec"]
    assert container(docs)["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", "5"]}}}
    server = Settings()
    budget = 5 + server.graceful_shutdown_seconds + server.shutdown_drain_seconds
    assert pod["terminationGracePeriodSeconds"] > budget


def test_deployment_defaults_to_two_spread_replicas_with_a_pdb(helm_env: dict[str, str]) -> None:
    docs = render(helm_env)
    deployment = only(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    ]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert all(c["labelSelector"]["matchLabels"] == selector for c in spread)
    pdb = only(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    assert all(c["matchLabelKeys"] == ["pod-template-hash"] for c in spread)
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"


def test_one_replica_gets_a_pdb_that_still_lets_drains_through(helm_env: dict[str, str]) -> None:
    pdb = only(render(helm_env, sets={"replicaCount": "1"}), "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]


def test_system_priority_comes_with_the_quota_that_admits_it(helm_env: dict[str, str]) -> None:
    quota = only(render(helm_env), "ResourceQuota")
    assert quota["metadata"]["name"] == f"{FULLNAME}-system-cluster-critical"
    assert quota["spec"] == {
        "hard": {"pods": "5"},  # 2 replicas, a surge Pod and the terminating ones
        "scopeSelector": {
            "matchExpressions": [
                {
                    "scopeName": "PriorityClass",
                    "operator": "In",
                    "values": ["system-cluster-critical"],
                }
            ]
        },
    }
    sized = only(render(helm_env, sets={"priorityClassQuota.pods": "9"}), "ResourceQuota")
    assert sized["spec"]["hard"] == {"pods": "9"}


@pytest.mark.parametrize(
    "sets",
    [
        {"priorityClassName": "team-high"},
        {"priorityClassName": ""},
        {"priorityClassQuota.enabled": "false"},
    ],
)
def test_no_quota_without_a_system_priority_class(
    helm_env: dict[str, str], sets: dict[str, str]
) -> None:
    assert "ResourceQuota" not in kinds(render(helm_env, sets=sets))


def test_memory_defaults_to_one_server_process(helm_env: dict[str, str]) -> None:
    docs = render(helm_env)
    assert container(docs)["resources"] == {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"memory": "256Mi"},
    }
    assert "TPU_WEBHOOK_WORKERS" not in env_of(docs)


def test_explicit_memory_wins_over_the_default(helm_env: dict[str, str]) -> None:
    resources = container(render(helm_env, sets={"resources.limits.memory": "1Gi"}))["resources"]
    assert resources["limits"] == {"memory": "1Gi"}
    assert resources["requests"]["memory"] == "128Mi"


def test_install_without_an_image_repository_fails_with_the_way_out(
    helm_env: dict[str, str],
) -> None:
    proc = template(helm_env, sets={"image.repository": ""})
    assert proc.returncode != 0
    assert "image.repository is required: no public tpu-webhook image is published" in proc.stderr
    assert "push it to a registry your nodes can pull from" in proc.stderr


def test_url_mode_needs_no_image(helm_env: dict[str, str]) -> None:
    docs = render(helm_env, CHART / "ci" / "url-values.yaml", sets={"image.repository": ""})
    assert "Deployment" not in kinds(docs)


def test_server_listens_on_all_interfaces_with_mounted_certificates(
    helm_env: dict[str, str],
) -> None:
    docs = render(helm_env)
    env = env_of(docs)
    assert env["TPU_WEBHOOK_HOST"] == "0.0.0.0"
    assert env["TPU_WEBHOOK_PORT"] == "8443"
    assert env["TPU_WEBHOOK_TLS_CERT_FILE"] == "/etc/tpu-webhook/tls/tls.crt"
    assert env["TPU_WEBHOOK_TLS_KEY_FILE"] == "/etc/tpu-webhook/tls/tls.key"
    assert "TPU_WEBHOOK_CATALOG" not in env
    mounts = {m["name"]: m for m in container(docs)["volumeMounts"]}
    # Whole-Secret mount: a subPath mount would never see a renewed certificate.
    assert mounts["tls"] == {"name": "tls", "mountPath": "/etc/tpu-webhook/tls", "readOnly": True}
    assert mounts["tmp"]["mountPath"] == "/tmp"
    volumes = {
        v["name"]: v for v in only(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes["tls"]["secret"]["secretName"] == f"{FULLNAME}-tls"


def test_probes_use_https_readyz_and_healthz(helm_env: dict[str, str]) -> None:
    main = container(render(helm_env))
    assert main["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "https",
        "scheme": "HTTPS",
    }
    assert main["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "https",
        "scheme": "HTTPS",
    }
    assert main["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    assert main["resources"]["limits"]["memory"] == "256Mi"


def test_image_tag_defaults_to_app_version(helm_env: dict[str, str]) -> None:
    chart = YAML(typ="safe", pure=True).load((CHART / "Chart.yaml").read_text())
    assert container(render(helm_env))["image"] == f"{REPOSITORY}:{chart['appVersion']}"


def test_service_maps_443_to_the_server_port(helm_env: dict[str, str]) -> None:
    service = only(render(helm_env), "Service")
    assert service["metadata"]["name"] == FULLNAME
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}
    ]


def test_extra_catalog_is_mounted_from_a_config_map(helm_env: dict[str, str]) -> None:
    docs = render(helm_env, sets={"catalog.extra": "accelerators: {}"})
    assert only(docs, "ConfigMap")["data"] == {"catalog.yaml": "accelerators: {}\n"}
    assert env_of(docs)["TPU_WEBHOOK_CATALOG"] == "/etc/tpu-webhook/catalog/catalog.yaml"
    annotations = only(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/catalog" in annotations


def test_every_server_setting_the_chart_sets_exists_in_the_server(
    helm_env: dict[str, str],
) -> None:
    sets = {"catalog.extra": "version: 1", "server.clientCAConfigMap": "client-ca"}
    names = {n for n in env_of(render(helm_env, sets=sets)) if n.startswith("TPU_WEBHOOK_")}
    fields = {n.removeprefix("TPU_WEBHOOK_").lower() for n in names}
    assert fields <= set(Settings.model_fields)
    assert {"host", "port", "tls_cert_file", "tls_key_file", "catalog", "client_ca_file"} <= fields


def test_the_ci_catalog_example_is_a_catalog_the_server_loads(tmp_path: Path) -> None:
    values = YAML(typ="safe", pure=True).load((CHART / "ci" / "monitoring-values.yaml").read_text())
    extra = tmp_path / "catalog.yaml"
    extra.write_text(values["catalog"]["extra"])
    load_catalog(extra)  # raises CatalogError with the field when the example is wrong


def test_rules_and_match_conditions_are_the_ones_generated_from_the_workload_table(
    helm_env: dict[str, str],
) -> None:
    entry = webhooks(render(helm_env))["validate.tpu-webhook.io"]
    assert [{k: v for k, v in r.items() if k != "operations"} for r in entry["rules"]] == rules()
    resources = {
        (g, r) for rule in entry["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert resources == {(w.group, w.resource) for w in WORKLOADS.values()}
    assert entry["matchConditions"][0]["expression"] == tpu_match_expression()
    update = webhooks(render(helm_env))["validate-update.tpu-webhook.io"]
    assert update["matchConditions"][1]["expression"] == spec_changed_expression()


URL_MODE_VALUES = [
    pytest.param([], ChartValues(), id="defaults"),
    pytest.param(
        ["webhook.validating.updateFailurePolicy=Fail", "webhook.exemptions.optOutLabel=false"],
        ChartValues(update_failure_policy="Fail", exempt_opt_out_label=False),
        id="update-fail-no-opt-out-label",
    ),
    pytest.param(
        ["webhook.exemptions.namespaces={research}"],
        ChartValues(exemption_namespaces=("research",)),
        id="exemption-namespaces",
    ),
]


@pytest.mark.parametrize(("sets", "values"), URL_MODE_VALUES)
def test_what_serve_prints_in_development_mode_is_what_the_chart_renders_in_url_mode(
    tmp_path: Path, sets: list[str], values: ChartValues
) -> None:
    make_certs(tmp_path)
    base = "https://127.0.0.1:18443"
    rendered = url_mode_configurations(base, (tmp_path / "ca.crt").read_bytes(), extra_values=sets)
    for document in rendered:
        assert document["metadata"]["labels"]["app.kubernetes.io/name"] == "tpu-webhook"
        document["metadata"] = {"name": document["metadata"]["name"]}
    assert rendered == url_configurations(base, (tmp_path / "ca.crt").read_bytes(), values=values)


# ------------------------------------------------------------------------- webhooks


def test_webhook_entries_have_the_required_fields(helm_env: dict[str, str]) -> None:
    entries = webhooks(render(helm_env))
    for entry in entries.values():
        assert entry["sideEffects"] == "None"
        assert entry["admissionReviewVersions"] == ["v1"]
        assert entry["timeoutSeconds"] == 5
        assert entry["matchPolicy"] == "Equivalent"
    assert entries["mutate.tpu-webhook.io"]["failurePolicy"] == "Fail"
    assert entries["validate.tpu-webhook.io"]["failurePolicy"] == "Fail"
    assert entries["validate-update.tpu-webhook.io"]["failurePolicy"] == "Ignore"
    assert entries["validate-warn.tpu-webhook.io"]["failurePolicy"] == "Ignore"
    assert entries["mutate.tpu-webhook.io"]["reinvocationPolicy"] == "IfNeeded"
    assert "reinvocationPolicy" not in entries["validate.tpu-webhook.io"]


def test_failure_policy_and_timeout_come_from_values(helm_env: dict[str, str]) -> None:
    sets = {"webhook.failurePolicy": "Ignore", "webhook.timeoutSeconds": "10"}
    entries = webhooks(render(helm_env, sets=sets))
    assert entries["mutate.tpu-webhook.io"]["failurePolicy"] == "Ignore"
    assert entries["validate.tpu-webhook.io"]["failurePolicy"] == "Ignore"
    assert {e["timeoutSeconds"] for e in entries.values()} == {10}


def test_updates_have_their_own_failure_policy(helm_env: dict[str, str]) -> None:
    entries = webhooks(render(helm_env, sets={"webhook.validating.updateFailurePolicy": "Fail"}))
    assert entries["validate-update.tpu-webhook.io"]["failurePolicy"] == "Fail"
    assert entries["validate-warn.tpu-webhook.io"]["failurePolicy"] == "Ignore"
    unchanged = webhooks(render(helm_env, sets={"webhook.failurePolicy": "Ignore"}))
    assert unchanged["validate-update.tpu-webhook.io"]["failurePolicy"] == "Ignore"
    assert unchanged["mutate.tpu-webhook.io"]["failurePolicy"] == "Ignore"


def test_rules_cover_every_kind_with_create_only_on_mutate(helm_env: dict[str, str]) -> None:
    entries = webhooks(render(helm_env))
    for name, operations in [
        ("mutate.tpu-webhook.io", ["CREATE"]),
        ("validate.tpu-webhook.io", ["CREATE"]),
        ("validate-update.tpu-webhook.io", ["UPDATE"]),
        ("validate-warn.tpu-webhook.io", ["CREATE", "UPDATE"]),
    ]:
        rules = entries[name]["rules"]
        assert [{k: r[k] for k in ("apiGroups", "apiVersions", "resources")} for r in rules] == (
            EXPECTED_RULES
        )
        assert all(r["operations"] == operations for r in rules)
        assert all(r["scope"] == "Namespaced" for r in rules)


def test_service_paths_route_each_entry(helm_env: dict[str, str]) -> None:
    entries = webhooks(render(helm_env))
    paths = {name: e["clientConfig"]["service"]["path"] for name, e in entries.items()}
    assert paths == {
        "mutate.tpu-webhook.io": "/mutate",
        "validate.tpu-webhook.io": "/validate",
        "validate-update.tpu-webhook.io": "/validate",
        "validate-warn.tpu-webhook.io": "/validate/warn",
    }
    for entry in entries.values():
        service = entry["clientConfig"]["service"]
        assert (service["name"], service["namespace"], service["port"]) == (
            FULLNAME,
            NAMESPACE,
            443,
        )


def test_namespace_selector_excludes_kube_system_the_release_namespace_and_opt_outs(
    helm_env: dict[str, str],
) -> None:
    sets = {"webhook.excludeNamespaces[0]": "gmp-system"}
    for entry in webhooks(render(helm_env, sets=sets)).values():
        exprs = ns_expressions(entry)
        operator, names = exprs["kubernetes.io/metadata.name"]
        assert operator == "NotIn"
        assert set(names) == {"kube-system", NAMESPACE, "gmp-system"}
        assert exprs[OPT_OUT_LABEL] == ("NotIn", ["true"])
        assert entry["objectSelector"]["matchExpressions"] == [
            {"key": OPT_OUT_LABEL, "operator": "NotIn", "values": ["true"]}
        ]


def test_the_namespace_selector_of_the_admin_narrows_every_entry(
    helm_env: dict[str, str],
) -> None:
    sets = {
        "webhook.namespaceSelector.matchLabels.tpu-webhook\\.io/enabled": "true",
        "webhook.namespaceSelector.matchExpressions[0].key": "team",
        "webhook.namespaceSelector.matchExpressions[0].operator": "In",
        "webhook.namespaceSelector.matchExpressions[0].values[0]": "research",
        "webhook.warnMode.enabled": "true",
    }
    entries = webhooks(render(helm_env, sets=sets))
    assert len(entries) == 4
    for entry in entries.values():
        selector = entry["namespaceSelector"]
        assert selector["matchLabels"] == {"tpu-webhook.io/enabled": "true"}
        exprs = ns_expressions(entry)
        assert exprs["team"] == ("In", ["research"])
        assert exprs[OPT_OUT_LABEL] == ("NotIn", ["true"])  # the exclusions stay
        assert exprs["kubernetes.io/metadata.name"][0] == "NotIn"
    for entry in webhooks(render(helm_env)).values():
        assert "matchLabels" not in entry["namespaceSelector"]  # by default: every namespace
        assert "team" not in ns_expressions(entry)


@pytest.mark.parametrize(
    "sets",
    [
        {"webhook.exemptions.optOutLabel": "false"},
        {"webhook.exemptions.namespaces[0]": "research"},
    ],
)
def test_no_object_selector_where_the_server_decides_the_opt_out_label(
    helm_env: dict[str, str], sets: dict[str, str]
) -> None:
    entries = webhooks(render(helm_env, sets=sets))
    assert len(entries) == 4
    assert all("objectSelector" not in e for e in entries.values())
    # the namespace label is the admin's: it stays
    assert all(ns_expressions(e)[OPT_OUT_LABEL] == ("NotIn", ["true"]) for e in entries.values())


def test_the_skip_annotation_switch_leaves_the_selectors_alone(helm_env: dict[str, str]) -> None:
    url = CHART / "ci" / "url-values.yaml"  # one caBundle: selfSigned makes a new CA per render
    sets = {"webhook.exemptions.skipAnnotation": "false"}
    assert webhooks(render(helm_env, url, sets=sets)) == webhooks(render(helm_env, url))


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        ({}, ("true", "true", "[]")),
        (
            {
                "webhook.exemptions.optOutLabel": "false",
                "webhook.exemptions.skipAnnotation": "false",
                "webhook.exemptions.namespaces": "{research,ml-team}",
            },
            ("false", "false", '["research","ml-team"]'),
        ),
    ],
)
def test_exemption_switches_reach_the_server_settings(
    helm_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    sets: dict[str, str],
    expected: tuple[str, str, str],
) -> None:
    env = env_of(render(helm_env, sets=sets))
    names = (
        "TPU_WEBHOOK_HONOUR_OPT_OUT_LABEL",
        "TPU_WEBHOOK_HONOUR_SKIP_ANNOTATION",
        "TPU_WEBHOOK_EXEMPTION_NAMESPACES",
    )
    assert tuple(env[n] for n in names) == expected
    for name in names:  # the server reads them from its environment
        monkeypatch.setenv(name, env[name])
    settings = Settings()
    assert settings.honour_opt_out_label is (expected[0] == "true")
    assert settings.honour_skip_annotation is (expected[1] == "true")
    assert settings.exemption_namespaces == frozenset(json.loads(expected[2]))


def test_warn_mode_namespaces_go_to_the_warn_entry_only(helm_env: dict[str, str]) -> None:
    entries = webhooks(render(helm_env))
    assert ns_expressions(entries["validate.tpu-webhook.io"])[WARN_LABEL] == ("NotIn", ["warn"])
    assert ns_expressions(entries["validate-update.tpu-webhook.io"])[WARN_LABEL] == (
        "NotIn",
        ["warn"],
    )
    assert ns_expressions(entries["validate-warn.tpu-webhook.io"])[WARN_LABEL] == ("In", ["warn"])
    assert WARN_LABEL not in ns_expressions(entries["mutate.tpu-webhook.io"])


def test_warn_mode_can_be_turned_off(helm_env: dict[str, str]) -> None:
    entries = webhooks(render(helm_env, sets={"webhook.warnMode.enabled": "false"}))
    assert set(entries) == {
        "mutate.tpu-webhook.io",
        "validate.tpu-webhook.io",
        "validate-update.tpu-webhook.io",
    }
    assert WARN_LABEL not in ns_expressions(entries["validate.tpu-webhook.io"])
    assert WARN_LABEL not in ns_expressions(entries["validate-update.tpu-webhook.io"])


def test_match_conditions_are_present_by_default(helm_env: dict[str, str]) -> None:
    entries = webhooks(render(helm_env))
    for name, entry in entries.items():
        condition, *more = entry["matchConditions"]
        # UPDATEs are sent only when they change the spec
        sends_updates = name in ("validate-update.tpu-webhook.io", "validate-warn.tpu-webhook.io")
        assert [c["name"] for c in more] == (["spec-changed"] if sends_updates else [])
        assert condition["name"] == "tpu-workload"
        for needle in (
            "cloud.google.com/gke-tpu-accelerator",
            "cloud.google.com/gke-tpu-topology",
            "google.com/tpu",
            "object.spec.jobTemplate.spec.template.spec",
            "object.spec.template.spec",
            "initContainers",
        ):
            assert needle in condition["expression"]


def test_match_conditions_are_absent_when_disabled(helm_env: dict[str, str]) -> None:
    entries = webhooks(render(helm_env, sets={"webhook.matchConditions.enabled": "false"}))
    assert all("matchConditions" not in e for e in entries.values())


def test_self_signed_ca_bundle_is_the_secret_ca_and_signs_the_serving_cert(
    helm_env: dict[str, str],
) -> None:
    docs = render(helm_env)
    (secret,) = [d for d in docs if d["kind"] == "Secret" and d["type"] == "kubernetes.io/tls"]
    ca_b64 = secret["data"]["ca.crt"]
    bundles = {e["clientConfig"]["caBundle"] for e in webhooks(docs).values()}
    assert bundles == {ca_b64}
    ca = x509.load_pem_x509_certificate(base64.b64decode(ca_b64))
    serving = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    verify_signed_by(serving, ca)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {
        FULLNAME,
        f"{FULLNAME}.{NAMESPACE}",
        f"{FULLNAME}.{NAMESPACE}.svc",
        f"{FULLNAME}.{NAMESPACE}.svc.cluster.local",
    }


def test_cert_manager_mode_injects_the_ca_instead_of_a_bundle(helm_env: dict[str, str]) -> None:
    docs = render(helm_env, CHART / "ci" / "cert-manager-values.yaml")
    assert "Secret" not in kinds(docs)
    for config in (d for d in docs if d["kind"].endswith("WebhookConfiguration")):
        annotations = config["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{FULLNAME}-serving"
    assert all("caBundle" not in e["clientConfig"] for e in webhooks(docs).values())
    serving = next(
        d
        for d in docs
        if d["kind"] == "Certificate" and d["metadata"]["name"] == f"{FULLNAME}-serving"
    )
    assert serving["spec"]["secretName"] == f"{FULLNAME}-tls"
    assert f"{FULLNAME}.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    assert serving["spec"]["issuerRef"]["name"] == f"{FULLNAME}-ca"


def test_cert_manager_mode_uses_a_given_issuer(helm_env: dict[str, str]) -> None:
    sets = {
        "certificates.certManager.issuerRef.name": "corp",
        "certificates.certManager.issuerRef.kind": "ClusterIssuer",
    }
    docs = render(helm_env, CHART / "ci" / "cert-manager-values.yaml", sets=sets)
    (certificate,) = [d for d in docs if d["kind"] == "Certificate"]
    assert certificate["spec"]["issuerRef"] == {"name": "corp", "kind": "ClusterIssuer"}
    assert "Issuer" not in kinds(docs)


def test_existing_secret_mode_uses_the_given_secret_and_ca(helm_env: dict[str, str]) -> None:
    values = CHART / "ci" / "existing-secret-values.yaml"
    given = YAML(typ="safe", pure=True).load(values.read_text())["certificates"]["existingSecret"]
    docs = render(helm_env, values)
    # Only the CA-only Secret: the TLS Secret is yours.
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"] == [
        f"{FULLNAME}-ca-bundle"
    ]
    volumes = only(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": given["name"]}} in volumes
    for entry in webhooks(docs).values():
        pem = base64.b64decode(entry["clientConfig"]["caBundle"]).decode()
        assert pem.strip() == given["caBundle"].strip()


def test_url_mode_points_every_entry_at_the_base_url(helm_env: dict[str, str]) -> None:
    docs = render(helm_env, CHART / "ci" / "url-values.yaml")
    urls = {name: e["clientConfig"]["url"] for name, e in webhooks(docs).items()}
    assert urls == {
        "mutate.tpu-webhook.io": "https://127.0.0.1:18443/mutate",
        "validate.tpu-webhook.io": "https://127.0.0.1:18443/validate",
        "validate-update.tpu-webhook.io": "https://127.0.0.1:18443/validate",
        "validate-warn.tpu-webhook.io": "https://127.0.0.1:18443/validate/warn",
    }
    assert all("service" not in e["clientConfig"] for e in webhooks(docs).values())
    assert kinds(docs) == {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}


def test_monitoring_objects_scrape_metrics_over_https(helm_env: dict[str, str]) -> None:
    docs = render(helm_env, CHART / "ci" / "monitoring-values.yaml")
    (endpoint,) = only(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["scheme"], endpoint["path"]) == (
        "https",
        "https",
        "/metrics",
    )
    assert endpoint["tlsConfig"]["ca"]["secret"] == {
        "name": f"{FULLNAME}-ca-bundle",
        "key": "ca.crt",
    }
    assert endpoint["tlsConfig"]["serverName"] == f"{FULLNAME}.{NAMESPACE}.svc"
    (scrape,) = only(docs, "PodMonitoring")["spec"]["endpoints"]
    assert (scrape["port"], scrape["scheme"], scrape["path"]) == ("https", "https", "/metrics")
    # Verified against the CA, for the name the serving certificate carries (not the Pod IP).
    assert scrape["tls"] == {
        "serverName": f"{FULLNAME}.{NAMESPACE}.svc",
        "ca": {"secret": {"name": f"{FULLNAME}-ca-bundle", "key": "ca.crt"}},
    }
    policy = only(docs, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["ingress"][0]["ports"] == [{"port": "https", "protocol": "TCP"}]


def readme_network_policy_values(tmp_path: Path) -> tuple[Path, list[Manifest]]:
    """The chart README's networkPolicy example as a values file, and its `from` list."""
    blocks = re.findall(r"```yaml\n(.*?)```", (CHART / "README.md").read_text(), re.DOTALL)
    (text,) = [b for b in blocks if b.startswith("networkPolicy:\n")]
    values = tmp_path / "network-policy-values.yaml"
    values.write_text(text)
    peers = YAML(typ="safe", pure=True).load(text)["networkPolicy"]["from"]
    return values, peers


def test_the_readme_network_policy_renders_the_gke_peers(
    helm_env: dict[str, str], tmp_path: Path
) -> None:
    values, peers = readme_network_policy_values(tmp_path)
    policy = only(render(helm_env, values), "NetworkPolicy")["spec"]
    assert policy["ingress"] == [{"ports": [{"port": "https", "protocol": "TCP"}], "from": peers}]
    (tunnel, direct) = peers
    # one peer: the konnectivity-agent Pods of kube-system, not either of them alone
    assert tunnel == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "konnectivity-agent"}},
    }
    assert set(direct) == {"ipBlock"}


def test_optional_objects_are_off_by_default(helm_env: dict[str, str]) -> None:
    optional = {"ServiceMonitor", "PodMonitoring", "NetworkPolicy", "ConfigMap", "Certificate"}
    assert not kinds(render(helm_env)) & optional


# ------------------------------------------------------------------------------ e2e


def kubectl_ok(cp: ControlPlane, *args: str, input: str | None = None) -> str:
    proc = cp.kubectl(*args, input=input)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def ensure_namespace(cp: ControlPlane, name: str, labels: Mapping[str, str] | None = None) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": dict(labels or {})},
    }
    kubectl_ok(cp, "apply", "-f", "-", input=json.dumps(manifest))


def get_json(cp: ControlPlane, *args: str) -> Any:
    return json.loads(kubectl_ok(cp, "get", *args, "-o", "json"))


def helm_ok(cp: ControlPlane, *args: str) -> str:
    proc = cp.helm(*args)
    assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def ca_bundles(cp: ControlPlane, name: str) -> set[str]:
    bundles = set()
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        config = get_json(cp, kind, name)
        bundles |= {w["clientConfig"]["caBundle"] for w in config["webhooks"]}
    return bundles


@pytest.mark.e2e
@pytest.mark.parametrize("values", CI_FILES, ids=CI_IDS)
def test_ci_values_file_is_accepted_by_the_api_server(
    control_plane: ControlPlane, helm_env: dict[str, str], values: Path
) -> None:
    namespace = "chart-dry-run"
    ensure_namespace(control_plane, namespace)
    docs = render(helm_env, values, namespace=namespace)
    # ServiceMonitor, PodMonitoring and cert-manager's Certificate/Issuer are CRDs that the
    # test API server does not have: those objects are left out, everything else must pass
    # server-side validation (including compiling the webhooks' CEL matchConditions).
    applied = [d for d in docs if d["kind"] not in CRD_KINDS]
    assert applied
    text = "\n---\n".join(json.dumps(d) for d in applied)
    out = kubectl_ok(control_plane, "apply", "--dry-run=server", "-f", "-", input=text)
    assert out.count("(server dry run)") == len(applied)


@pytest.mark.e2e
def test_the_readme_network_policy_is_accepted_by_the_api_server(
    control_plane: ControlPlane, helm_env: dict[str, str], tmp_path: Path
) -> None:
    ensure_namespace(control_plane, "chart-dry-run")
    values, _ = readme_network_policy_values(tmp_path)
    policy = only(render(helm_env, values, namespace="chart-dry-run"), "NetworkPolicy")
    out = kubectl_ok(
        control_plane, "apply", "--dry-run=server", "-f", "-", input=json.dumps(policy)
    )
    assert "(server dry run)" in out


@pytest.mark.e2e
def test_url_mode_installs_without_a_deployment(control_plane: ControlPlane) -> None:
    release, namespace = "tpu-url", "tpu-url-system"
    values = CHART / "ci" / "url-values.yaml"
    helm_ok(
        control_plane,
        "install",
        release,
        str(CHART),
        "-n",
        namespace,
        "--create-namespace",
        "-f",
        str(values),
        "--set",
        "deployment.enabled=false",
    )
    try:
        name = f"{release}-tpu-webhook"
        config = get_json(control_plane, "validatingwebhookconfiguration", name)
        urls = [w["clientConfig"]["url"] for w in config["webhooks"]]
        assert urls == [
            "https://127.0.0.1:18443/validate",
            "https://127.0.0.1:18443/validate",
            "https://127.0.0.1:18443/validate/warn",
        ]
        deployments = get_json(control_plane, "deployments", "-n", namespace)
        assert deployments["items"] == []
    finally:
        helm_ok(control_plane, "uninstall", release, "-n", namespace)
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


@pytest.mark.e2e
def test_upgrade_keeps_the_self_signed_ca_and_ca_bundle(control_plane: ControlPlane) -> None:
    release, namespace = "tpu-ca", "tpu-ca-system"
    name = f"{release}-tpu-webhook"
    helm_ok(
        control_plane, "install", release, str(CHART), "-n", namespace, "--create-namespace",
        "--set", f"image.repository={REPOSITORY}",
    )  # fmt: skip
    try:
        secret = get_json(control_plane, "secret", f"{name}-tls", "-n", namespace)["data"]
        assert ca_bundles(control_plane, name) == {secret["ca.crt"]}

        helm_ok(control_plane, "upgrade", release, str(CHART), "-n", namespace, "--reuse-values")

        after = get_json(control_plane, "secret", f"{name}-tls", "-n", namespace)["data"]
        assert after == secret  # CA, certificate and key all kept
        assert ca_bundles(control_plane, name) == {secret["ca.crt"]}
        history = json.loads(
            helm_ok(control_plane, "history", release, "-n", namespace, "-o", "json")
        )
        assert [h["revision"] for h in history] == [1, 2]
    finally:
        helm_ok(control_plane, "uninstall", release, "-n", namespace)
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


# --- matchConditions, namespace and object selectors on the real API server --------------
#
# The chart is installed in url mode pointing at a closed loopback port, with failurePolicy
# Fail: an object the API server sends to the webhook fails with 'failed calling webhook "<name>"'
# and an object it does not send is admitted. Server-side dry runs go through admission and
# store nothing. Run once with only the mutating webhook and once with only the validating
# ones, so each configuration's CEL is exercised.

MC_RELEASE, MC_NAMESPACE = "tpu-mc", "tpu-mc-system"
TEAM, WARN_NS, OPT_OUT_NS = "tpu-mc-team", "tpu-mc-warn", "tpu-mc-optout"


def _container(**resources: dict[str, Any]) -> dict[str, Any]:
    return {"name": "main", "image": "trainer", "resources": resources}


def _pod_spec(
    node_selector: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": containers or [_container()]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if init:
        spec["initContainers"] = init
    return spec


def _required_affinity(labels: dict[str, str]) -> dict[str, Any]:
    expressions = [{"key": k, "operator": "In", "values": [v]} for k, v in labels.items()]
    terms = [{"matchExpressions": expressions}]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


def _wrap(kind: str, spec: dict[str, Any]) -> Manifest:
    template = {"metadata": {"labels": {"app": "x"}}, "spec": spec}
    body: dict[str, Any]
    if kind == "Pod":
        api, body = "v1", spec
    elif kind == "Job":
        api, body = "batch/v1", {"template": template}
    elif kind == "CronJob":
        api, body = (
            "batch/v1",
            {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}},
        )
    else:
        api = "apps/v1"
        body = {"selector": {"matchLabels": {"app": "x"}}, "template": template}
        if kind == "StatefulSet":
            body["serviceName"] = "x"
        spec["restartPolicy"] = "Always"
    return {"apiVersion": api, "kind": kind, "metadata": {"name": kind.lower()}, "spec": body}


ACCELERATOR = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"}
TOPOLOGY = {"cloud.google.com/gke-tpu-topology": "2x4"}
TPU_4 = {"google.com/tpu": "4"}
TPU_SPECS: dict[str, Any] = {
    "accelerator-selector": lambda: _pod_spec(node_selector=ACCELERATOR),
    "topology-selector": lambda: _pod_spec(node_selector=TOPOLOGY),
    "container-request": lambda: _pod_spec(containers=[_container(requests=TPU_4)]),
    "container-limit": lambda: _pod_spec(containers=[_container(limits=TPU_4)]),
    "init-container-limit": lambda: _pod_spec(init=[{**_container(limits=TPU_4), "name": "init"}]),
    "node-affinity": lambda: {**_pod_spec(), "affinity": _required_affinity(ACCELERATOR)},
}
PLAIN_SPECS: dict[str, Any] = {
    "no-resources": lambda: _pod_spec(),
    "cpu-only": lambda: _pod_spec(
        containers=[_container(requests={"cpu": "1"}, limits={"cpu": "1"})]
    ),
    "other-selector": lambda: _pod_spec(node_selector={"cloud.google.com/gke-nodepool": "cpu"}),
    "other-affinity": lambda: {
        **_pod_spec(),
        "affinity": _required_affinity({"cloud.google.com/gke-nodepool": "cpu"}),
    },
}
KINDS = ["Pod", "Job", "CronJob", "Deployment", "StatefulSet"]


@pytest.fixture(scope="module", params=["mutate", "validate"])
def unreachable_webhook(
    request: pytest.FixtureRequest, control_plane: ControlPlane
) -> Iterator[str]:
    """The chart installed against a closed port; yields the one webhook name that is on."""
    which: str = request.param
    for ns, labels in [
        (TEAM, {}),
        (WARN_NS, {WARN_LABEL: "warn"}),
        (OPT_OUT_NS, {OPT_OUT_LABEL: "true"}),
    ]:
        ensure_namespace(control_plane, ns, labels)
    values = CHART / "ci" / "url-values.yaml"
    helm_ok(
        control_plane,
        "install",
        MC_RELEASE,
        str(CHART),
        "-n",
        MC_NAMESPACE,
        "--create-namespace",
        "-f",
        str(values),
        "--set",
        f"webhook.url.base=https://127.0.0.1:{free_port()}",
        "--set",
        f"webhook.mutating.enabled={str(which == 'mutate').lower()}",
        "--set",
        f"webhook.validating.enabled={str(which == 'validate').lower()}",
        # The warn entry is failurePolicy Ignore by default; Fail makes its calls visible.
        "--set",
        "webhook.warnMode.failurePolicy=Fail",
    )
    try:
        yield f"{which}.tpu-webhook.io"
    finally:
        helm_ok(control_plane, "uninstall", MC_RELEASE, "-n", MC_NAMESPACE)


def dry_run_create(
    cp: ControlPlane, namespace: str, obj: Manifest
) -> subprocess.CompletedProcess[str]:
    obj = {
        **obj,
        "metadata": {
            **obj["metadata"],
            "name": f"{obj['metadata']['name']}-{uuid.uuid4().hex[:6]}",
        },
    }
    return cp.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(obj)
    )


def assert_sent_to(proc: subprocess.CompletedProcess[str], webhook: str) -> None:
    assert proc.returncode != 0, f"admitted without calling {webhook}: {proc.stdout}"
    assert f'failed calling webhook "{webhook}"' in proc.stderr


def assert_not_sent(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr
    assert "(server dry run)" in proc.stdout


def expected_rejection(webhook: str, shape: str) -> str:
    """What stops a TPU object when the webhook is unreachable.

    A container that requests google.com/tpu without a limit is invalid to the API server
    itself (extended resources need limits), and validating webhooks run after that check:
    only the mutating webhook, which may fill the limit in, ever sees that shape.
    """
    if shape == "container-request" and webhook != "mutate.tpu-webhook.io":
        return "Limit must be set for non overcommitable resources"
    return f'failed calling webhook "{webhook}"'


@pytest.mark.e2e
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", sorted(TPU_SPECS))
def test_tpu_workloads_of_every_kind_are_sent_to_the_webhook(
    control_plane: ControlPlane, unreachable_webhook: str, kind: str, shape: str
) -> None:
    proc = dry_run_create(control_plane, TEAM, _wrap(kind, TPU_SPECS[shape]()))
    assert proc.returncode != 0, f"admitted without calling {unreachable_webhook}: {proc.stdout}"
    assert expected_rejection(unreachable_webhook, shape) in proc.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", sorted(PLAIN_SPECS))
def test_workloads_without_tpus_never_reach_the_webhook(
    control_plane: ControlPlane, unreachable_webhook: str, kind: str, shape: str
) -> None:
    assert_not_sent(dry_run_create(control_plane, TEAM, _wrap(kind, PLAIN_SPECS[shape]())))


@pytest.mark.e2e
@pytest.mark.parametrize("namespace", ["kube-system", MC_NAMESPACE, OPT_OUT_NS])
def test_excluded_and_opted_out_namespaces_never_reach_the_webhook(
    control_plane: ControlPlane, unreachable_webhook: str, namespace: str
) -> None:
    job = _wrap("Job", TPU_SPECS["container-limit"]())
    assert_not_sent(dry_run_create(control_plane, namespace, job))


@pytest.mark.e2e
def test_an_object_with_the_opt_out_label_never_reaches_the_webhook(
    control_plane: ControlPlane, unreachable_webhook: str
) -> None:
    job = _wrap("Job", TPU_SPECS["container-limit"]())
    job["metadata"]["labels"] = {OPT_OUT_LABEL: "true"}
    assert_not_sent(dry_run_create(control_plane, TEAM, job))


@pytest.mark.e2e
def test_warn_mode_namespace_goes_to_the_warn_webhook_instead_of_the_enforcing_one(
    control_plane: ControlPlane, unreachable_webhook: str
) -> None:
    # Mutation applies in warn-mode namespaces too; validation goes to the warn entry (made
    # failurePolicy Fail by the fixture so that the call shows).
    expected = {
        "mutate.tpu-webhook.io": "mutate.tpu-webhook.io",
        "validate.tpu-webhook.io": "validate-warn.tpu-webhook.io",
    }[unreachable_webhook]
    proc = dry_run_create(control_plane, WARN_NS, _wrap("Job", TPU_SPECS["container-limit"]()))
    assert_sent_to(proc, expected)
