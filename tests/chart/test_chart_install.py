"""`helm install` of the chart against a real API server: webhooks in url mode pointing at a real
`tpu-webhook serve` (a TPU Job is patched and a broken one refused through the installed
configuration), and the selfSigned pair renewed by `helm upgrade`."""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from ruamel.yaml import YAML

from dev.controlplane import ControlPlane
from tests.support.selfmanaged import pem_certificates, pem_of, verifies
from tests.support.webhook_process import WebhookProcess, make_certs

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tpu-webhook"
RELEASE, SYSTEM, WORKLOADS = "tpu-chart", "tpu-chart-system", "chart-workloads"


def seed_job() -> dict[str, Any]:
    docs = YAML(typ="safe", pure=True).load_all(
        (ROOT / "tests" / "seeds" / "v4-2x2x4-indexed-job.yaml").read_text()
    )
    job: dict[str, Any] = next(d for d in docs if d and d["kind"] == "Job")
    return job


@pytest.fixture(scope="module")
def installed(
    control_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebhookProcess]:
    certs = tmp_path_factory.mktemp("chart-webhook")
    make_certs(certs)
    with WebhookProcess(certs) as server:
        install = control_plane.helm(
            "install",
            RELEASE,
            str(CHART),
            "-n",
            SYSTEM,
            "--create-namespace",
            "--set",
            "deployment.enabled=false",
            "--set",
            "webhook.url.enabled=true",
            "--set",
            "webhook.url.iUnderstandThisIsForTesting=true",
            "--set",
            f"webhook.url.base={server.url}",
            "--set-file",
            f"webhook.url.caBundle={server.ca_file}",
        )
        assert install.returncode == 0, install.stderr
        control_plane.kubectl("create", "namespace", WORKLOADS, check=True)
        try:
            yield server
        finally:
            control_plane.helm("uninstall", RELEASE, "-n", SYSTEM)
            control_plane.kubectl("delete", "namespace", WORKLOADS, SYSTEM, "--wait=false")


def create(cp: ControlPlane, obj: dict[str, Any], *flags: str) -> Any:
    return cp.kubectl(
        "create", "-n", WORKLOADS, "-o", "json", *flags, "-f", "-", input=json.dumps(obj)
    )


def test_installed_chart_patches_a_tpu_job(
    control_plane: ControlPlane, installed: WebhookProcess
) -> None:
    job = seed_job()
    job["metadata"]["name"] = "via-chart"
    deadline = time.monotonic() + 60
    while True:  # the API server loads new webhook configurations asynchronously
        result = create(control_plane, job, "--dry-run=server")
        assert result.returncode == 0, result.stderr
        env = json.loads(result.stdout)["spec"]["template"]["spec"]["containers"][0].get("env")
        if env or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    result = create(control_plane, job)
    assert result.returncode == 0, result.stderr
    stored = json.loads(result.stdout)["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"]: e.get("value") for e in stored["env"]}["TPU_WORKER_HOSTNAMES"] == ",".join(
        f"via-chart-{i}.headless-svc" for i in range(4)
    )
    reviews = [
        json.loads(line)
        for line in installed.wait_for_log(
            '"endpoint":"validate","mode":"enforce","kind":"Job",'
            '"namespace":"chart-workloads","name":"via-chart",'
            '"operation":"CREATE","outcome":"warned"'
        ).splitlines()
        if '"msg":"review"' in line and '"name":"via-chart"' in line
    ]
    assert {(r["endpoint"], r["outcome"]) for r in reviews} >= {
        ("mutate", "patched"),
        ("validate", "warned"),
    }


def test_installed_chart_refuses_a_broken_tpu_job(
    control_plane: ControlPlane, installed: WebhookProcess
) -> None:
    job = seed_job()
    job["metadata"]["name"] = "broken-via-chart"
    job["spec"]["parallelism"] = 2
    result = create(control_plane, job)
    assert result.returncode == 1
    assert (
        "denied the request: spec.parallelism: Invalid value: 2: 2x2x4 = 16 chips at 4 per "
        "host needs 4 hosts; set spec.parallelism and spec.completions to 4" in result.stderr
    )
    assert '"name":"broken-via-chart"' in installed.wait_for_log('"name":"broken-via-chart"')


# --- selfSigned renewal by helm upgrade --------------------------------------------------
#
# A selfSigned release installed for real (its Pods stay Pending: no nodes), its Secret's
# annotations aged as the days would age them, then `helm upgrade`: what the upgrade's `lookup`
# decides is what a cluster gets.

NOT_BEFORE, NOT_AFTER = "tpu-webhook.io/not-before", "tpu-webhook.io/not-after"
PREVIOUS = "tpu-webhook.io/previous-ca-not-after"


class SelfSigned:
    """A selfSigned install of the chart: its Secrets and caBundles as the API server has them."""

    def __init__(self, cp: ControlPlane, release: str) -> None:
        self.cp, self.release, self.namespace = cp, release, f"{release}-system"
        self.fullname = f"{release}-tpu-webhook"
        self.host = f"{self.fullname}.{self.namespace}.svc"

    def helm(self, command: str, *args: str) -> None:
        """`helm install|upgrade` of the chart with these arguments."""
        proc = self.cp.helm(command, self.release, str(CHART), "-n", self.namespace, *args)
        assert proc.returncode == 0, proc.stderr

    def uninstall(self) -> None:
        self.cp.helm("uninstall", self.release, "-n", self.namespace, check=True)
        self.cp.kubectl("delete", "namespace", self.namespace, "--wait=false")

    def secret(self, suffix: str = "tls") -> dict[str, Any]:
        proc = self.cp.kubectl(
            "get", "secret", f"{self.fullname}-{suffix}", "-n", self.namespace, "-o", "json"
        )
        assert proc.returncode == 0, proc.stderr
        secret: dict[str, Any] = json.loads(proc.stdout)
        return secret

    def data(self, suffix: str = "tls") -> dict[str, bytes]:
        return {k: base64.b64decode(v) for k, v in self.secret(suffix)["data"].items()}

    def annotations(self) -> dict[str, str]:
        return dict(self.secret()["metadata"].get("annotations") or {})

    def annotate(self, **times: dt.datetime | None) -> None:
        """Set (or, with None, remove) the Secret's tpu-webhook.io/<key> annotations."""
        args = []
        for key, moment in times.items():
            name = f"tpu-webhook.io/{key.replace('_', '-')}"
            args.append(f"{name}={_stamp(moment)}" if moment else f"{name}-")
        secret = ["secret", f"{self.fullname}-tls", "-n", self.namespace]
        self.cp.kubectl("annotate", *secret, "--overwrite", *args, check=True)

    def ca_bundles(self) -> set[bytes]:
        bundles = set()
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            proc = self.cp.kubectl("get", kind, self.fullname, "-o", "json", check=True)
            entries = json.loads(proc.stdout)["webhooks"]
            bundles |= {base64.b64decode(w["clientConfig"]["caBundle"]) for w in entries}
        return bundles


def _stamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)


@pytest.fixture
def self_signed(control_plane: ControlPlane) -> Iterator[SelfSigned]:
    release = SelfSigned(control_plane, f"renew-{uuid.uuid4().hex[:6]}")
    release.helm("install", "--create-namespace", "--set", "image.repository=localhost/tpu")
    try:
        yield release
    finally:
        release.uninstall()


def test_an_upgrade_after_two_thirds_of_the_life_renews_the_pair_and_keeps_the_old_ca(
    self_signed: SelfSigned,
) -> None:
    first = self_signed.data()
    (old_ca,) = pem_certificates(first["ca.crt"])
    old_leaf = x509.load_pem_x509_certificate(first["tls.crt"])
    self_signed.helm("upgrade", "--reuse-values")
    assert self_signed.data() == first  # 0 of 365 days: kept

    # Day 250 of the 365: less than a third left.
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    self_signed.annotate(
        not_before=now - dt.timedelta(days=250), not_after=now + dt.timedelta(days=115)
    )
    self_signed.helm("upgrade", "--reuse-values")

    renewed = self_signed.data()
    assert renewed["tls.crt"] != first["tls.crt"]
    assert renewed["tls.key"] != first["tls.key"]
    cas = pem_certificates(renewed["ca.crt"])
    assert len(cas) == 2
    assert cas[0] == old_ca  # the old CA first, still trusted
    new_leaf = x509.load_pem_x509_certificate(renewed["tls.crt"])
    new_leaf.verify_directly_issued_by(cas[1])
    assert self_signed.ca_bundles() == {renewed["ca.crt"]}
    assert self_signed.data("ca-bundle") == {"ca.crt": renewed["ca.crt"]}
    # A Pod still serving the old certificate and one serving the new are both trusted.
    assert verifies(old_leaf, renewed["ca.crt"], self_signed.host)
    assert verifies(new_leaf, renewed["ca.crt"], self_signed.host)
    assert not verifies(old_leaf, pem_of(cas[1]), self_signed.host)  # the check can fail
    annotations = self_signed.annotations()
    assert annotations[PREVIOUS] == _stamp(now + dt.timedelta(days=115))
    life = _time(annotations[NOT_AFTER]) - _time(annotations[NOT_BEFORE])
    assert life == dt.timedelta(days=365)
    assert abs(_time(annotations[NOT_BEFORE]) - now) < dt.timedelta(minutes=2)
    assert abs(new_leaf.not_valid_after_utc - _time(annotations[NOT_AFTER])) < dt.timedelta(
        seconds=5
    )

    self_signed.helm("upgrade", "--reuse-values")
    assert self_signed.data() == renewed  # the new pair is kept, and the old CA with it

    # The old CA has expired: the next upgrade drops it, and keeps the pair.
    self_signed.annotate(previous_ca_not_after=now - dt.timedelta(seconds=1))
    self_signed.helm("upgrade", "--reuse-values")
    settled = self_signed.data()
    assert pem_certificates(settled["ca.crt"]) == [cas[1]]
    assert settled["tls.crt"] == renewed["tls.crt"]
    assert self_signed.ca_bundles() == {settled["ca.crt"]}
    assert self_signed.data("ca-bundle") == {"ca.crt": settled["ca.crt"]}
    assert PREVIOUS not in self_signed.annotations()


def test_a_pair_without_its_lifetime_annotations_is_renewed_at_the_next_upgrade(
    self_signed: SelfSigned,
) -> None:
    # As an earlier chart left it (a 10-year pair, no annotations), or a renewal asked for.
    first = self_signed.data()
    self_signed.annotate(not_before=None, not_after=None)
    self_signed.helm("upgrade", "--reuse-values")
    renewed = self_signed.data()
    assert renewed["tls.crt"] != first["tls.crt"]
    cas = pem_certificates(renewed["ca.crt"])
    assert cas[0] == pem_certificates(first["ca.crt"])[0]
    assert len(cas) == 2
    annotations = self_signed.annotations()
    assert PREVIOUS not in annotations  # its end is unknown: kept until the next renewal
    assert {NOT_BEFORE, NOT_AFTER} <= set(annotations)
    self_signed.helm("upgrade", "--reuse-values")
    assert self_signed.data() == renewed
    assert self_signed.ca_bundles() == {renewed["ca.crt"]}
