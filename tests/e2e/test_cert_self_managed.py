"""selfManaged certificates against a real API server, with exactly the chart's RBAC.

The chart is rendered by `helm template` in selfManaged mode and applied with kubectl (an empty
Secret, the RBAC, both webhook configurations without caBundle). `tpu-webhook serve` runs on
loopback with a kubeconfig holding a token of the chart's ServiceAccount, so every call it makes
is authorized by the real RBAC authorizer against the chart's Role and ClusterRole. What the API
server would accept is checked as it checks it: the served certificate against each webhook
entry's caBundle, for the Service's DNS name.

This module runs its own control plane: the configurations point at a Service nothing serves, and
must not meet the TPU workloads of the session's other tests.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dev.controlplane import ControlPlane, tools_dir
from tests.support.selfmanaged import (
    Release,
    SelfManagedServer,
    pem_certificates,
    pem_of,
    verifies,
)
from tests.support.webhook_process import WebhookProcess, make_certs
from webhook.serving.rotation import RENEW, Plan, next_change
from webhook.serving.selfmanaged import Conflict, KubeApi, SecretCertificates, Target, stored_of
from webhook.serving.tls import ServingTLS

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

FIRST = Release("first", "certs-first")


@pytest.fixture(scope="module")
def cp() -> Iterator[ControlPlane]:
    plane = ControlPlane(tools_dir())
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def first(cp: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first release applied; the kubeconfig of its ServiceAccount."""
    FIRST.apply(cp)
    return FIRST.service_account_kubeconfig(cp, tmp_path_factory.mktemp("first") / "sa")


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
    assert replica_a.readyz() == (200, {"status": "ok", "certificate": True, "catalog": 6})
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
         "import webhook.serving.server, webhook.serving.selfmanaged"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    cumulative = {
        line.rsplit("|", 1)[1].strip(): int(line.split("|")[1])
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line and line.split("|")[1].strip().isdigit()
    }
    for module in ("webhook.serving.server", "webhook.serving.selfmanaged"):
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
        ["get", "mutatingwebhookconfiguration", FIRST.fullname],
        [*annotate, "mutatingwebhookconfiguration", FIRST.fullname, "x=1"],
        ["get", "validatingwebhookconfiguration", FIRST.fullname],
        [*annotate, "validatingwebhookconfiguration", FIRST.fullname, "x=1"],
    ]
    for args in allowed:
        assert as_service_account(cp, first, *args) == "", args
    refused = [
        ["get", "secret", "other", "-n", ns],
        ["get", "secrets", "-n", ns],  # list
        ["create", "secret", "generic", "new", "-n", ns, dry],
        ["delete", "secret", own, "-n", ns, dry],
        ["get", "secret", own, "-n", "certs-elsewhere"],
        [*annotate, "secret", "other", "-n", ns, "x=1"],
        ["get", "mutatingwebhookconfiguration", "someone-else"],
        [*annotate, "mutatingwebhookconfiguration", "someone-else", "x=1"],
        ["get", "mutatingwebhookconfigurations"],  # list
        ["delete", "validatingwebhookconfiguration", FIRST.fullname, dry],
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
