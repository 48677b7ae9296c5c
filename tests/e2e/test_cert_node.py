"""selfManaged certificates on the one-node cluster: the chart installed with helm, its Pods (the
image built from the Dockerfile) keep their own Secret and both caBundles through the API with the
chart's RBAC, and a GitOps re-render and a forced renewal happen under a loop of TPU Pod creations
that must not lose one (test_node.py's CreateLoop). A negative control shows the loop sees a
caBundle that does not match what is served: a re-apply carrying another CA, as a selfSigned
re-render does, fails creates until the server puts its bundle back.

The Pods reach the API server at the `kubernetes` Service's address through
tests/support/kubernetes_service.py (the node has no kube-proxy). The renewal's waits are short
(syncSeconds 2, propagationSeconds 5, overlapSeconds 20) so it completes in a minute.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client, config

from tests.e2e.test_node import CreateLoop
from tests.support.image import BuiltImage
from tests.support.kubernetes_service import kubernetes_service
from tests.support.node import ClusterNode
from tests.support.selfmanaged import CHART, pem_certificates, verifies
from webhook.certificates.create import make_ca

pytestmark = [pytest.mark.e2e, pytest.mark.debian, pytest.mark.timeout(900)]

RELEASE, SYSTEM, LOAD = "tpu", "tpu-webhook-system", "tpu-load"
FULLNAME = f"{RELEASE}-tpu-webhook"
SECRET = f"{FULLNAME}-certs"
SERVICE_HOST = f"{FULLNAME}.{SYSTEM}.svc"
KINDS = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
SYNC_S = 2
SETTLE_S = 3 * SYNC_S  # the loop keeps going this long after a change has completed


def values(image: BuiltImage) -> list[str]:
    sets = {
        "image.repository": image.repository,
        "image.tag": image.tag,
        "image.pullPolicy": "Never",
        "certificates.mode": "selfManaged",
        "certificates.selfManaged.syncSeconds": str(SYNC_S),
        "certificates.selfManaged.propagationSeconds": "5",
        "certificates.selfManaged.overlapSeconds": "20",
    }
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def ok(node: ClusterNode, *args: str, input: str | None = None, timeout: float = 120) -> str:
    proc = node.kubectl(*args, input=input, timeout=timeout)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}:\n{proc.stderr}"
    return proc.stdout


def get_json(node: ClusterNode, *args: str) -> Any:
    return json.loads(ok(node, "get", *args, "-o", "json"))


def secret(node: ClusterNode) -> dict[str, Any]:
    return dict(get_json(node, "secret", SECRET, "-n", SYSTEM))


def bundles(node: ClusterNode) -> dict[str, str]:
    """Per webhook entry, its caBundle (base64, as stored)."""
    return {
        f"{kind}/{entry['name']}": entry["clientConfig"].get("caBundle", "")
        for kind in KINDS
        for entry in get_json(node, kind, FULLNAME)["webhooks"]
    }


def pod_ips(node: ClusterNode) -> list[str]:
    pods = get_json(node, "pods", "-n", SYSTEM, "-l", f"app.kubernetes.io/instance={RELEASE}")
    return [
        p["status"]["podIP"]
        for p in pods["items"]
        if "deletionTimestamp" not in p["metadata"] and p["status"].get("podIP")
    ]


def served(ip: str) -> x509.Certificate:
    """What a webhook Pod presents (the API server dials the Pod IP the same way)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection((ip, 8443), timeout=5) as sock,
        context.wrap_socket(sock) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def all_trusted(node: ClusterNode) -> bool:
    found = bundles(node).values()
    return all(
        verifies(served(ip), base64.b64decode(b), SERVICE_HOST)
        for ip in pod_ips(node)
        for b in found
    )


class Recorded:
    """The API client of a CreateLoop that records each create's outcome, in order: "patched"
    (the webhook answered), "unpatched" (created without it), or why it failed."""

    def __init__(self, api: client.CoreV1Api) -> None:
        self.api = api
        self.outcomes: list[str] = []

    def create_namespaced_pod(self, namespace: str, body: Any) -> Any:
        try:
            created = self.api.create_namespaced_pod(namespace, body)
        except Exception as error:
            text = str(error)
            self.outcomes.append(
                "no endpoints" if "no endpoints available" in text
                else "x509" if "x509" in text
                else text
            )  # fmt: skip
            raise
        ports = {p.container_port for p in created.spec.containers[0].ports or []}
        self.outcomes.append("patched" if 8471 in ports else "unpatched")
        return created

    def after_first_answer(self) -> list[str]:
        return self.outcomes[self.outcomes.index("patched") :]


def loop_api(node: ClusterNode) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(node.cp.kubeconfig)))


@pytest.fixture(scope="module")
def installed(
    cluster_node: ClusterNode, built_image: BuiltImage, certificate_figures: dict[str, str]
) -> Iterator[ClusterNode]:
    """`helm install` in selfManaged mode while TPU Pods are created in a loop: until the Pods
    are Ready the API server has no endpoint to call (failurePolicy Fail refuses the creates);
    once the webhook has answered once, nothing may fail any more."""
    node = cluster_node
    with kubernetes_service(node.cp):
        ok(node, "create", "namespace", LOAD)
        node.wait_for(
            "ServiceAccount tpu-load/default",
            lambda: node.kubectl("get", "sa", "default", "-n", LOAD).returncode == 0,
        )
        recorded = Recorded(loop_api(node))
        began = time.monotonic()
        with CreateLoop(recorded):  # type: ignore[arg-type]
            ok(node, "create", "namespace", SYSTEM)
            install = node.helm("install", RELEASE, str(CHART), "-n", SYSTEM, *values(built_image))
            assert install.returncode == 0, install.stderr
            ok(node, "-n", SYSTEM, "rollout", "status", f"deployment/{FULLNAME}",
               "--timeout=240s", timeout=260)  # fmt: skip
            node.wait_for("both caBundles", lambda: all(bundles(node).values()), timeout=60)
            node.wait_for("the Pods' certificates trusted", lambda: all_trusted(node), 60)
            certificate_figures["node: helm install -> Pods Ready, caBundles written"] = (
                f"{time.monotonic() - began:.1f} s"
            )
            node.wait_for("a TPU Pod patched", lambda: patched(node), timeout=60)
            time.sleep(SETTLE_S)
        before = recorded.outcomes[: len(recorded.outcomes) - len(recorded.after_first_answer())]
        certificate_figures[
            "node: helm install under the loop, before the webhook first answered"
        ] = ", ".join(f"{before.count(o)} {o}" for o in sorted(set(before)))
        after = recorded.after_first_answer()
        certificate_figures["node: helm install under the loop, from its first answer on"] = (
            ", ".join(f"{after.count(o)} {o}" for o in sorted(set(after)))
        )
        # Before: created without a webhook until the configurations exist, then refused while
        # no Pod is Ready (failurePolicy Fail). From the first answer on: every create patched.
        assert set(before) <= {"unpatched", "no endpoints", "x509"}, before
        assert set(after) == {"patched"}, after
        node.kubectl("delete", "pods", "--all", "-n", LOAD, "--wait=false")
        yield node
        node.helm("uninstall", RELEASE, "-n", SYSTEM)


def patched(node: ClusterNode) -> bool:
    proc = node.kubectl(
        "create", "--dry-run=server", "-n", LOAD, "-o", "json", "-f", "-",
        input=json.dumps(CreateLoop.pod()),
    )  # fmt: skip
    if proc.returncode != 0:
        return False
    ports = json.loads(proc.stdout)["spec"]["containers"][0].get("ports", [])
    return 8471 in {p["containerPort"] for p in ports}


@pytest.fixture
def create_loop(installed: ClusterNode) -> Iterator[CreateLoop]:
    yield CreateLoop(loop_api(installed))
    installed.kubectl("delete", "pods", "--all", "-n", LOAD, "--wait=false")


def counts(loop: CreateLoop, began: float) -> str:
    return (
        f"{loop.attempts} / {len(loop.failures)} / {loop.unpatched}"
        f" in {time.monotonic() - began:.1f} s"
    )


def test_the_pods_fill_the_secret_and_both_ca_bundles_with_the_chart_rbac(
    installed: ClusterNode,
) -> None:
    data = secret(installed)["data"]
    assert set(data) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    assert set(bundles(installed).values()) == {data["ca.crt"]}
    ips = pod_ips(installed)
    assert len(ips) == 2
    assert {served(ip).public_bytes(serialization.Encoding.PEM) for ip in ips} == {
        base64.b64decode(data["tls.crt"])
    }
    assert all_trusted(installed)
    sa = f"system:serviceaccount:{SYSTEM}:{FULLNAME}"
    can = installed.kubectl("auth", "can-i", "list", "secrets", "-n", SYSTEM, f"--as={sa}")
    assert can.stdout.strip() == "no"


def test_a_gitops_re_render_under_a_create_loop_fails_no_create(
    installed: ClusterNode,
    built_image: BuiltImage,
    create_loop: CreateLoop,
    certificate_figures: dict[str, str],
) -> None:
    before_secret, before_bundles = secret(installed)["data"], bundles(installed)
    rendered = installed.helm(
        "template", RELEASE, str(CHART), "-n", SYSTEM, *values(built_image), check=True
    ).stdout
    began = time.monotonic()
    with create_loop as loop:
        time.sleep(SETTLE_S)
        for _ in range(2):  # a GitOps tool applies again and again
            ok(installed, "apply", "-f", "-", input=rendered)
            time.sleep(SETTLE_S)
    certificate_figures[
        "node: 2x helm template | kubectl apply: creates attempted / failed / unpatched"
    ] = counts(loop, began)
    assert loop.failures == []
    assert loop.unpatched == 0
    assert loop.attempts > 50
    assert secret(installed)["data"] == before_secret  # no new CA, nothing wiped
    assert bundles(installed) == before_bundles  # no caBundle flip-flop


def test_a_forced_renewal_under_a_create_loop_fails_no_create(
    installed: ClusterNode, create_loop: CreateLoop, certificate_figures: dict[str, str]
) -> None:
    (old_ca,) = pem_certificates(base64.b64decode(secret(installed)["data"]["ca.crt"]))
    began = time.monotonic()
    seen: dict[str, float] = {}
    with create_loop as loop:
        time.sleep(SETTLE_S)
        ok(installed, "annotate", "secret", SECRET, "-n", SYSTEM, "--overwrite",
           "tpu-webhook.io/renew=node-e2e")  # fmt: skip
        renewed = time.monotonic()
        while time.monotonic() - renewed < 120 and len(seen) < 3:
            found = [base64.b64decode(b) for b in bundles(installed).values()]
            certificates = [served(ip) for ip in pod_ips(installed)]
            for certificate in certificates:  # what the API server would accept, every moment
                assert all(verifies(certificate, b, SERVICE_HOST) for b in found), seen
            cas = [set(pem_certificates(b)) for b in found]
            issuers = {c.issuer for c in certificates}
            moment = time.monotonic() - renewed
            if all(len(c) == 2 for c in cas):
                seen.setdefault("both CAs in every caBundle", moment)
            if seen and old_ca.subject not in issuers:
                seen.setdefault("every Pod serves the new certificate", moment)
            if len(seen) == 2 and all(old_ca not in c for c in cas):
                seen["old CA gone"] = moment
            time.sleep(0.5)
        time.sleep(SETTLE_S)
    certificate_figures["node: forced renewal: creates attempted / failed / unpatched"] = counts(
        loop, began
    )
    certificate_figures["node: forced renewal phases"] = ", ".join(
        f"{k} at {v:.1f} s" for k, v in seen.items()
    )
    assert list(seen) == [
        "both CAs in every caBundle",
        "every Pod serves the new certificate",
        "old CA gone",
    ]
    assert loop.failures == []
    assert loop.unpatched == 0
    assert loop.attempts > 100
    assert all_trusted(installed)


def test_the_loop_sees_a_re_apply_that_carries_another_ca_bundle(
    installed: ClusterNode, create_loop: CreateLoop, certificate_figures: dict[str, str]
) -> None:
    """Negative control: what a selfSigned re-render does to the configurations (a new CA in the
    caBundle, the Pods still serving the old one) fails creates, until the server puts its own
    bundle back within syncSeconds."""
    ours = bundles(installed)
    other = base64.b64encode(make_ca("someone else's CA").cert_pem).decode()
    began = time.monotonic()
    with create_loop as loop:
        time.sleep(SETTLE_S)
        for kind in KINDS:
            configuration = get_json(installed, kind, FULLNAME)
            patch = [
                {"op": "replace", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": other}
                for i in range(len(configuration["webhooks"]))
            ]
            ok(installed, "patch", kind, FULLNAME, "--type=json", "-p", json.dumps(patch))
        installed.wait_for("the server's caBundle back", lambda: bundles(installed) == ours, 30)
        time.sleep(SETTLE_S)
    certificate_figures["node: negative control, foreign caBundle: attempted / failed"] = (
        f"{loop.attempts} / {len(loop.failures)} in {time.monotonic() - began:.1f} s"
    )
    assert loop.failures
    assert all("failed calling webhook" in f for f in loop.failures)
    assert all("x509: certificate signed by unknown authority" in f for f in loop.failures)
