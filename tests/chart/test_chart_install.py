"""`helm install` of the chart, webhooks in url mode pointing at a real `tpu-webhook serve`:
a TPU Job is patched and a broken one refused through the installed configuration."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from dev.controlplane import ControlPlane
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
