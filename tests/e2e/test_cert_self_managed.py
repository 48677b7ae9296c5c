"""selfManaged certificates against a real API server, with exactly the chart's RBAC.

The chart is rendered by `helm template` in selfManaged mode and applied with kubectl (two empty
Secrets, the RBAC, the caBundle guard policy, both webhook configurations without caBundle).
`tpu-webhook serve` runs on loopback with a kubeconfig holding a token of the chart's
ServiceAccount, so every call it makes is authorized by the real RBAC authorizer against the
chart's Role and ClusterRole, and admitted by the chart's ValidatingAdmissionPolicy. What the API
server would accept is checked as it checks it: the served certificate against each webhook
entry's caBundle, for the Service's DNS name.

This module runs its own control plane: the configurations point at a Service nothing serves, and
must not meet the TPU workloads of the session's other tests.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dev.components import DEFAULT_CONTROLLERS
from dev.controlplane import ControlPlane
from dev.tools import tools_dir
from tests.support.catalog_facts import READY
from tests.support.selfmanaged import (
    Release,
    SelfManagedServer,
    get_json,
    pem_certificates,
    pem_of,
    verifies,
)
from tests.support.webhook_process import WebhookProcess, make_certs
from webhook.certificates.create import make_ca
from webhook.certificates.kubeapi import Conflict, KubeApi
from webhook.certificates.rotation import RENEW, Plan, next_change
from webhook.certificates.selfmanaged import SecretCertificates, Target, stored_of
from webhook.serving.tls import ServingTLS

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

FIRST = Release("first", "certs-first")


@pytest.fixture(scope="module")
def cp() -> Iterator[ControlPlane]:
    # The policy status controller type-checks the guard's CEL against both configuration kinds.
    controllers = (*DEFAULT_CONTROLLERS, "validatingadmissionpolicy-status-controller")
    plane = ControlPlane(tools_dir(), controllers=controllers)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def first(cp: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first release applied, its guard in force; the kubeconfig of its ServiceAccount."""
    FIRST.apply(cp)
    kubeconfig = FIRST.service_account_kubeconfig(cp, tmp_path_factory.mktemp("first") / "sa")
    wait_for_guard(cp, FIRST, kubeconfig)
    return kubeconfig


@pytest.fixture(scope="module")
def replica_a(
    cp: ControlPlane,
    first: Path,
    tmp_path_factory: pytest.TempPathFactory,
    certificate_figures: dict[str, str],
) -> Iterator[SelfManagedServer]:
    assert "data" not in FIRST.secret_json(cp)  # the chart rendered it empty
    server = SelfManagedServer(FIRST.server_env(first), tmp_path_factory.mktemp("a") / "log")
    with server:
        seconds = server.wait_ready()
        certificate_figures["serve -> ready, empty Secret (fills it)"] = f"{seconds:.2f} s"
        yield server


def wait_for_guard(cp: ControlPlane, release: Release, kubeconfig: Path) -> None:
    """Until the API server has loaded the release's policy: a label the ServiceAccount tries to
    put on either configuration (a dry run) is refused by it."""

    def refused(kind: str) -> bool:
        label = [kind, release.fullname, "guard-canary=1", "--dry-run=server", "--overwrite"]
        return "ValidatingAdmissionPolicy" in as_service_account(cp, kubeconfig, "label", *label)

    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        wait_until(f"the guard policy on the {kind}", lambda kind=kind: refused(kind))


def wait_until(what: str, probe: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def trusted_everywhere(cp: ControlPlane, release: Release, *servers: SelfManagedServer) -> bool:
    """Every server's certificate is accepted with every webhook entry's caBundle."""
    bundles = release.ca_bundles(cp)
    served = [s.served() for s in servers]
    return all(verifies(c, b, release.service_host) for c in served for b in bundles.values())


# --------------------------------------------------------------------- filling and adopting


def test_the_server_fills_the_empty_secret_and_both_ca_bundles(
    cp: ControlPlane, replica_a: SelfManagedServer
) -> None:
    data = FIRST.secret_data(cp)
    assert set(data) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    (ca,) = pem_certificates(data["ca.crt"])
    # The CAs, and no key, in the Secret others may read.
    assert FIRST.secret_data(cp, FIRST.ca_secret) == {"ca.crt": data["ca.crt"]}
    bundles = FIRST.ca_bundles(cp)
    assert sorted(bundles) == [
        "mutatingwebhookconfiguration/mutate.tpu-webhook.io",
        "validatingwebhookconfiguration/validate-update.tpu-webhook.io",
        "validatingwebhookconfiguration/validate-warn.tpu-webhook.io",
        "validatingwebhookconfiguration/validate.tpu-webhook.io",
    ]
    assert set(bundles.values()) == {pem_of(ca)}
    served = replica_a.served()
    assert pem_of(served) == data["tls.crt"]
    assert all(verifies(served, b, FIRST.service_host) for b in bundles.values())
    assert not verifies(served, b"", FIRST.service_host)  # the check can fail
    assert replica_a.readyz() == (
        200,
        READY,
    )
    shown = ["get", "secret", FIRST.secret, "-n", FIRST.namespace, "--show-managed-fields"]
    fields = json.loads(cp.kubectl(*shown, "-o", "json", check=True).stdout)["metadata"]
    assert {"tpu-webhook"} <= {m["manager"] for m in fields["managedFields"]}


def test_a_second_replica_adopts_what_is_stored_without_writing(
    cp: ControlPlane,
    first: Path,
    replica_a: SelfManagedServer,
    tmp_path: Path,
    certificate_figures: dict[str, str],
) -> None:
    version = FIRST.secret_json(cp)["metadata"]["resourceVersion"]
    with SelfManagedServer(FIRST.server_env(first), tmp_path / "b.log") as replica_b:
        seconds = replica_b.wait_ready()
        certificate_figures["serve -> ready, filled Secret (adopts it)"] = f"{seconds:.2f} s"
        assert replica_b.served() == replica_a.served()
        assert FIRST.secret_json(cp)["metadata"]["resourceVersion"] == version
        assert "wrote Secret" not in replica_b.logs()


def test_start_up_in_file_mode_for_comparison(
    tmp_path: Path, certificate_figures: dict[str, str]
) -> None:
    make_certs(tmp_path)
    began = time.monotonic()
    with WebhookProcess(tmp_path):
        certificate_figures["serve -> ready, mounted files (selfSigned mode)"] = (
            f"{time.monotonic() - began:.2f} s"
        )
    # What this mode's module adds to the import of the server (python -X importtime, cumulative
    # microseconds; the other modes never import it).
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c",
         "import webhook.serving.server, webhook.certificates.selfmanaged"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    cumulative = {
        line.rsplit("|", 1)[1].strip(): int(line.split("|")[1])
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line and line.split("|")[1].strip().isdigit()
    }
    for module in ("webhook.serving.server", "webhook.certificates.selfmanaged"):
        certificate_figures[f"import {module} (cumulative, after the ones before)"] = (
            f"{cumulative[module] / 1000:.0f} ms"
        )


# ---------------------------------------------------------------------------- racing


def test_of_two_writers_of_one_version_one_wins_and_the_other_adopts_it(
    cp: ControlPlane, tmp_path: Path
) -> None:
    release = Release("race", "certs-race")
    release.apply(cp)
    api = KubeApi.connect(release.service_account_kubeconfig(cp, tmp_path / "sa"))
    target = Target(release.namespace, release.secret, ())
    plan = Plan(dns_names=(release.service_host,))
    x, y = (
        SecretCertificates(
            ServingTLS(None, None), api, target, plan, sync_seconds=1, failing_seconds=60
        )
        for _ in range(2)
    )
    secret = api.read_secret(release.namespace, release.secret)  # both read this version
    now = dt.datetime.now(dt.UTC)
    changes = [next_change(stored_of(secret), [], now, plan) for _ in range(2)]
    assert all(c is not None for c in changes)
    x.write(secret, changes[0])  # type: ignore[arg-type]
    with pytest.raises(Conflict, match="409: Operation cannot be fulfilled on secrets"):
        y.write(secret, changes[1])  # type: ignore[arg-type]
    serve = y.sync()
    assert serve is not None
    assert y.writes == 0
    assert serve.cert == changes[0].data["tls.crt"]  # type: ignore[union-attr]
    release.delete(cp)


def test_replicas_started_together_on_an_empty_secret_agree_on_one_ca(
    cp: ControlPlane, tmp_path: Path, certificate_figures: dict[str, str]
) -> None:
    release = Release("together", "certs-together")
    release.apply(cp)
    kubeconfig = release.service_account_kubeconfig(cp, tmp_path / "sa")
    servers = [
        SelfManagedServer(release.server_env(kubeconfig), tmp_path / f"{i}.log") for i in range(3)
    ]
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_ready()
        cas = pem_certificates(release.secret_data(cp)["ca.crt"])
        assert len(cas) == 1
        assert {s.served().issuer for s in servers} == {cas[0].subject}
        assert trusted_everywhere(cp, release, *servers)
        logs = [s.logs() for s in servers]
        firsts = sum(log.count("first CA and serving certificate") for log in logs)
        adopted = sum(log.count("changed since read; adopting it") for log in logs)
        certificate_figures["3 replicas on an empty Secret: first writes / conflicts"] = (
            f"{firsts} / {adopted}"
        )
        assert firsts == 1
    finally:
        for server in servers:
            server.stop()
    release.delete(cp)


# ------------------------------------------------------------------------------ RBAC


def ca_bundle_patch(cp: ControlPlane, release: Release, kind: str) -> str:
    """A patch as the server makes it: a new caBundle in every entry of the configuration."""
    bundle = base64.b64encode(make_ca("another-ca").cert_pem).decode()
    entries = get_json(cp, kind, release.fullname)["webhooks"]
    hooks = [{"name": e["name"], "clientConfig": {"caBundle": bundle}} for e in entries]
    return json.dumps({"webhooks": hooks})


def as_service_account(cp: ControlPlane, kubeconfig: Path, *args: str) -> str:
    """kubectl as the chart's ServiceAccount; the error text if refused, "" if allowed."""
    proc = cp.kubectl("--kubeconfig", str(kubeconfig), *args)
    return "" if proc.returncode == 0 else proc.stderr


def test_the_chart_rbac_allows_its_own_names_and_refuses_everything_else(
    cp: ControlPlane, first: Path
) -> None:
    ns, own = FIRST.namespace, FIRST.secret
    cp.kubectl("create", "secret", "generic", "other", "-n", ns, check=True)
    cp.kubectl("create", "namespace", "certs-elsewhere", check=True)
    cp.kubectl("create", "secret", "generic", own, "-n", "certs-elsewhere", check=True)
    other_hook = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "someone-else"},
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(other_hook), check=True)
    dry = "--dry-run=server"
    annotate = ["annotate", "--overwrite", dry]
    allowed = [
        ["get", "secret", own, "-n", ns],
        [*annotate, "secret", own, "-n", ns, "x=1"],
        ["get", "secret", FIRST.ca_secret, "-n", ns],
        [*annotate, "secret", FIRST.ca_secret, "-n", ns, "x=1"],
        ["get", "mutatingwebhookconfiguration", FIRST.fullname],
        ["get", "validatingwebhookconfiguration", FIRST.fullname],
        *(
            ["patch", kind, FIRST.fullname, dry, "-p", ca_bundle_patch(cp, FIRST, kind)]
            for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
        ),
    ]
    for args in allowed:
        assert as_service_account(cp, first, *args) == "", args
    # RBAC grants the patch; the guard refuses all but the caBundle.
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        refused = as_service_account(cp, first, *annotate, kind, FIRST.fullname, "x=1")
        assert f"denied request: metadata: Forbidden: {FIRST.user} may change only" in refused
    refused = [
        ["get", "secret", "other", "-n", ns],
        ["get", "secrets", "-n", ns],  # list
        ["create", "secret", "generic", "new", "-n", ns, dry],
        ["delete", "secret", own, "-n", ns, dry],
        ["delete", "secret", FIRST.ca_secret, "-n", ns, dry],
        ["get", "secret", own, "-n", "certs-elsewhere"],
        [*annotate, "secret", "other", "-n", ns, "x=1"],
        ["get", "mutatingwebhookconfiguration", "someone-else"],
        [*annotate, "mutatingwebhookconfiguration", "someone-else", "x=1"],
        ["get", "mutatingwebhookconfigurations"],  # list
        ["delete", "validatingwebhookconfiguration", FIRST.fullname, dry],
        ["delete", "mutatingwebhookconfiguration", FIRST.fullname, dry],
        ["get", "validatingadmissionpolicy", f"{FIRST.fullname}-ca-bundle-only"],
        ["delete", "validatingadmissionpolicybinding", f"{FIRST.fullname}-ca-bundle-only", dry],
        ["get", "pods", "-n", ns],
        ["get", "configmaps", "-n", ns],
    ]
    refusal = f'User "system:serviceaccount:{ns}:{FIRST.fullname}" cannot '
    for args in refused:
        assert refusal in as_service_account(cp, first, *args), args
    # update (PUT) is not granted either: the server only patches.
    secret = json.dumps(FIRST.secret_json(cp))
    proc = cp.kubectl("--kubeconfig", str(first), "replace", dry, "-f", "-", input=secret)
    assert proc.returncode != 0
    assert 'cannot update resource "secrets"' in proc.stderr
    hook = json.dumps(get_json(cp, "validatingwebhookconfiguration", FIRST.fullname))
    proc = cp.kubectl("--kubeconfig", str(first), "replace", dry, "-f", "-", input=hook)
    assert proc.returncode != 0
    assert 'cannot update resource "validatingwebhookconfigurations"' in proc.stderr


# ---------------------------------------------------------------- the caBundle guard

GUARDED = Release("guarded", "certs-guarded")
MUTATING, VALIDATING = "mutatingwebhookconfiguration", "validatingwebhookconfiguration"
ONLY = "may change only webhooks[*].clientConfig.caBundle of this configuration"


@pytest.fixture(scope="module")
def guarded(cp: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A release applied, its guard in force; the kubeconfig of its ServiceAccount."""
    GUARDED.apply(cp)
    kubeconfig = GUARDED.service_account_kubeconfig(cp, tmp_path_factory.mktemp("guard") / "sa")
    wait_for_guard(cp, GUARDED, kubeconfig)
    return kubeconfig


def denial(kind: str, message: str) -> str:
    """What kubectl prints when the guard refuses a change of the release's `kind`."""
    policy = f"{GUARDED.fullname}-ca-bundle-only"
    return (
        f"Error from server (Forbidden): {kind}s.admissionregistration.k8s.io "
        f"\"{GUARDED.fullname}\" is forbidden: ValidatingAdmissionPolicy '{policy}' with binding "
        f"'{policy}' denied request: {message}"
    )


def json_patch(cp: ControlPlane, kubeconfig: Path, kind: str, *ops: dict[str, Any]) -> str:
    """`kubectl patch --type=json` of the release's configuration as the ServiceAccount; "" if
    allowed, else what kubectl printed."""
    patch = ["patch", kind, GUARDED.fullname, "--type=json", "-p", json.dumps(list(ops))]
    proc = cp.kubectl("--kubeconfig", str(kubeconfig), *patch)
    return "" if proc.returncode == 0 else proc.stderr.strip()


def test_the_guard_type_checks_against_both_configuration_kinds(
    cp: ControlPlane, guarded: Path
) -> None:
    name = f"{GUARDED.fullname}-ca-bundle-only"

    def checked() -> dict[str, Any] | None:
        status: dict[str, Any] = get_json(cp, "validatingadmissionpolicy", name).get("status", {})
        return status if "typeChecking" in status else None

    status = wait_until("the policy's type checking", checked)
    assert status == {"observedGeneration": 1, "typeChecking": {}}  # no expressionWarnings


def test_the_service_account_may_change_the_ca_bundles(cp: ControlPlane, guarded: Path) -> None:
    for kind in (MUTATING, VALIDATING):
        patch = ca_bundle_patch(cp, GUARDED, kind)
        assert as_service_account(cp, guarded, "patch", kind, GUARDED.fullname, "-p", patch) == ""
        stored = {
            e["clientConfig"]["caBundle"] for e in get_json(cp, kind, GUARDED.fullname)["webhooks"]
        }
        assert stored == {e["clientConfig"]["caBundle"] for e in json.loads(patch)["webhooks"]}


WEBHOOKS = f"webhooks: Forbidden: {GUARDED.user} {ONLY} (selfManaged certificates); "
METADATA = (
    f"metadata: Forbidden: {GUARDED.user} {ONLY} (selfManaged certificates); its labels, "
    "annotations, finalizers and ownerReferences stay as installed"
)
REFUSED = {
    "a rule": (
        VALIDATING,
        [{"op": "add", "path": "/webhooks/0/rules/0/operations/-", "value": "DELETE"}],
        WEBHOOKS + "it changed validate.tpu-webhook.io",
    ),
    "the failurePolicy": (
        VALIDATING,
        [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Fail"}],
        WEBHOOKS + "it changed validate.tpu-webhook.io",
    ),
    "a matchCondition": (
        VALIDATING,
        [{"op": "replace", "path": "/webhooks/2/matchConditions/0/expression", "value": "true"}],
        WEBHOOKS + "it changed validate-warn.tpu-webhook.io",
    ),
    "the namespaceSelector": (
        VALIDATING,
        [{"op": "remove", "path": "/webhooks/0/namespaceSelector/matchExpressions/0"}],
        WEBHOOKS + "it changed validate.tpu-webhook.io",
    ),
    "the clientConfig service": (
        MUTATING,
        [{"op": "replace", "path": "/webhooks/0/clientConfig/service/name", "value": "elsewhere"}],
        WEBHOOKS + "it changed mutate.tpu-webhook.io",
    ),
    "the clientConfig url": (
        MUTATING,
        [
            {"op": "remove", "path": "/webhooks/0/clientConfig/service"},
            {"op": "add", "path": "/webhooks/0/clientConfig/url", "value": "https://10.9.9.9/x"},
        ],
        WEBHOOKS + "it changed mutate.tpu-webhook.io",
    ),
    "the reinvocationPolicy": (
        MUTATING,
        [{"op": "replace", "path": "/webhooks/0/reinvocationPolicy", "value": "Never"}],
        WEBHOOKS + "it changed mutate.tpu-webhook.io",
    ),
    "a rule with a new caBundle": (
        VALIDATING,
        [
            {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": "Cg=="},
            {"op": "replace", "path": "/webhooks/0/rules/0/scope", "value": "*"},
        ],
        WEBHOOKS + "it changed validate.tpu-webhook.io",
    ),
    "an entry removed": (
        VALIDATING,
        [{"op": "remove", "path": "/webhooks/1"}],
        WEBHOOKS + "it added, removed or reordered entries",
    ),
    "the order of the entries": (
        VALIDATING,
        [{"op": "move", "from": "/webhooks/1", "path": "/webhooks/0"}],
        WEBHOOKS + "it added, removed or reordered entries",
    ),
    "a label": (
        VALIDATING,
        [{"op": "add", "path": "/metadata/labels/team", "value": "x"}],
        METADATA,
    ),
    "an ownerReference": (
        MUTATING,
        [
            {
                "op": "add",
                "path": "/metadata/ownerReferences",
                "value": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "gone",
                        "uid": "00000000-0000-0000-0000-000000000001",
                    }
                ],
            }
        ],
        METADATA,
    ),
    "a finalizer": (
        MUTATING,
        [{"op": "add", "path": "/metadata/finalizers", "value": ["example.com/hold"]}],
        METADATA,
    ),
}


@pytest.mark.parametrize("change", REFUSED)
def test_the_service_account_may_change_nothing_else(
    cp: ControlPlane, guarded: Path, change: str
) -> None:
    kind, ops, message = REFUSED[change]
    before = get_json(cp, kind, GUARDED.fullname)
    assert json_patch(cp, guarded, kind, *ops) == denial(kind, message)
    after = get_json(cp, kind, GUARDED.fullname)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


@pytest.mark.parametrize("change", ["a rule", "the failurePolicy", "a matchCondition", "a label"])
def test_an_admin_still_changes_them(cp: ControlPlane, guarded: Path, change: str) -> None:
    kind, ops, _ = REFUSED[change]
    before = get_json(cp, kind, GUARDED.fullname)
    # A server-side dry run goes through admission, the guard included, and stores nothing.
    patch = ["patch", kind, GUARDED.fullname, "--type=json", "-p", json.dumps(ops)]
    proc = cp.kubectl(*patch, "--dry-run=server", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    assert content(json.loads(proc.stdout)) != content(before)


def content(configuration: dict[str, Any]) -> dict[str, Any]:
    """A configuration without the metadata every write changes."""
    volatile = {"resourceVersion", "generation", "managedFields"}
    metadata = {k: v for k, v in configuration["metadata"].items() if k not in volatile}
    return {**configuration, "metadata": metadata}


# ------------------------------------------------------------------------ renewals


def watch_renewal(
    cp: ControlPlane, release: Release, servers: list[SelfManagedServer], old: bytes
) -> dict[str, float]:
    """Sample (every ~0.1 s) until the old CA has left every caBundle and every server serves a
    certificate from the new one; every sample must be accepted with every caBundle. Returns
    when each phase was first seen (seconds from the call)."""
    began, seen = time.monotonic(), {}
    (old_ca,) = pem_certificates(old)
    deadline = began + 60
    while time.monotonic() < deadline:
        bundles = release.ca_bundles(cp)
        served = [s.served() for s in servers]
        for certificate in served:
            for entry, bundle in bundles.items():
                assert verifies(certificate, bundle, release.service_host), (entry, seen)
        cas = [set(pem_certificates(b)) for b in bundles.values()]
        moment = time.monotonic() - began
        if all(len(c) == 2 for c in cas):
            seen.setdefault("both CAs in every caBundle", moment)
        if all(c.issuer != old_ca.subject for c in served):
            seen.setdefault("every replica serves the new certificate", moment)
        if all(old_ca not in c for c in cas) and len(seen) == 2:
            seen["old CA gone from every caBundle"] = moment
            return seen
        time.sleep(0.1)
    raise AssertionError(f"the renewal did not complete in 60 s: {seen}")


def test_a_forced_renewal_keeps_what_every_replica_serves_trusted_throughout(
    cp: ControlPlane,
    first: Path,
    replica_a: SelfManagedServer,
    tmp_path: Path,
    certificate_figures: dict[str, str],
) -> None:
    with SelfManagedServer(FIRST.server_env(first), tmp_path / "b.log") as replica_b:
        replica_b.wait_ready()
        old = FIRST.secret_data(cp)["ca.crt"]
        cp.kubectl(
            "annotate", "secret", FIRST.secret, "-n", FIRST.namespace, f"{RENEW}=e2e",
            "--overwrite", check=True,
        )  # fmt: skip
        seen = watch_renewal(cp, FIRST, [replica_a, replica_b], old)
    assert list(seen) == [
        "both CAs in every caBundle",
        "every replica serves the new certificate",
        "old CA gone from every caBundle",
    ]
    # propagation 1.5 s and overlap 4 s (tests/support/selfmanaged.py FAST) separate the phases.
    assert seen["every replica serves the new certificate"] - seen["both CAs in every caBundle"] > 1
    certificate_figures["forced renewal (propagation 1.5 s, overlap 4 s)"] = ", ".join(
        f"{k} at {v:.1f} s" for k, v in seen.items()
    )
    annotations = FIRST.secret_json(cp)["metadata"]["annotations"]
    assert annotations["tpu-webhook.io/renewed"] == "e2e"
    # The CA-only Secret follows: the new CA alone, as in every caBundle.
    (new,) = pem_certificates(FIRST.secret_data(cp)["ca.crt"])
    wait_until(
        "the new CA alone in the CA-only Secret",
        lambda: FIRST.secret_data(cp, FIRST.ca_secret) == {"ca.crt": pem_of(new)},
    )


def test_a_deleted_and_re_applied_secret_recovers_without_an_untrusted_moment(
    cp: ControlPlane, first: Path, replica_a: SelfManagedServer
) -> None:
    old = FIRST.secret_data(cp)["ca.crt"]
    cp.kubectl("delete", "secret", FIRST.secret, "-n", FIRST.namespace, check=True)
    assert trusted_everywhere(cp, FIRST, replica_a)  # it serves what it had, still trusted
    FIRST.apply(cp)  # e.g. a GitOps sync puts the empty Secret back
    watch_renewal(cp, FIRST, [replica_a], old)


# ------------------------------------------------------------------------- readiness


def test_readyz_says_what_is_missing_until_a_certificate_from_the_secret_is_served(
    cp: ControlPlane, tmp_path: Path
) -> None:
    release = Release("unready", "certs-unready")
    release.apply(cp)
    binding = ["rolebinding", f"{release.fullname}-certificates", "-n", release.namespace]
    cp.kubectl("delete", *binding, check=True)
    kubeconfig = release.service_account_kubeconfig(cp, tmp_path / "sa")
    with SelfManagedServer(release.server_env(kubeconfig), tmp_path / "log") as server:
        # "... yet" alone until the first read of the Secret has been refused; then with why
        _, body = wait_until(
            "a 503 after the first refused read",
            lambda: (r := server.readyz())[0] == 503 and ": 403: " in r[1].get("reason", "") and r,
        )
        assert body["status"] == "not ready"
        assert body["reason"].startswith(
            f"no serving certificate from Secret {release.namespace}/{release.secret} yet: "
            f'403: secrets "{release.secret}" is forbidden: User "system:serviceaccount:'
        )
        release.apply(cp)  # the RoleBinding is back
        wait_until("ready", lambda: server.readyz()[0] == 200)
        cp.kubectl("delete", *binding, check=True)
        _, body = wait_until("a 503 again", lambda: (r := server.readyz())[0] == 503 and r)
        assert body["reason"].startswith(
            f"Secret {release.namespace}/{release.secret} and the caBundles not confirmed for "
        )
        assert "is forbidden" in body["reason"]
        release.apply(cp)
        wait_until("ready again", lambda: server.readyz()[0] == 200)
    release.delete(cp)
