"""TrainJob and PathwaysJob: owners whose controllers make JobSets (issue 20).

Kubeflow Trainer's TrainJob runs with its real controller and webhooks (`trainer_operator`, v2.3.0
from its Go module, beside the session's JobSet operator) on the ClusterTrainingRuntimes of its
JAX-on-TPU guide (tests/e2e/data/, each with its `# Source:`), applied with `kubectl apply -f` as
a user types them and first dry-run on the server (same verdict, word for word, nothing stored).
A correct TrainJob makes a JobSet, the JobSet controller its Job, the Job controller its Pods; the
Pods carry the JAX variables Trainer's JAX runtime writes and the TPU worker variables of exactly
one writer, tpu-webhook, which writes them into a JobSet's Jobs as they are created.

Pathways' PathwaysJob has no controller here (its Go module is named `pathways-job`, which the
module proxy cannot serve): its CRD, written from the real one (tests/e2e/data/crds/),
makes the API server store PathwaysJobs and call the admission webhooks for them.
tests/corpus/controllers/pathways.py models what its controller would create.

A broken TrainJob and a broken PathwaysJob are refused at the owner with a field-level message.
Those two tests, and the two that look for tpu-webhook's review of a correct TrainJob and
PathwaysJob, depend on TrainJob and PathwaysJob being in tpu-webhook's workload table (the chart
then registers them with the API server); they name the rule code and field they expect.

No scheduler or kubelet runs: Pods stay Pending.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from dev.controlplane import ControlPlane
from dev.operator_crds import install_crds
from dev.operators import Operators
from dev.tools import REPO_ROOT
from tests.corpus import controllers as ch
from tests.e2e.test_owners import (
    INDEX,
    JOBSET,
    absent,
    assert_tpu_host,
    controller_of,
    denied,
    env_of,
    get,
    items,
    job_index_env,
    reviews,
    same_verdict_dry_run_first,
    wait_for,
    wait_reviewed,
    worker_env,
)
from tests.support.webhook_process import WebhookProcess
from webhook.admission.dispatch import Policy
from webhook.catalog import load_catalog
from webhook.offline import admit

pytestmark = pytest.mark.e2e

DATA = REPO_ROOT / "tests" / "e2e" / "data"
RUNTIMES = [
    DATA / "trainer-runtime-jax-distributed.yaml",
    DATA / "trainer-runtime-jax-tpu-v5-8.yaml",
]
TRAINJOB_SDK = DATA / "trainer-trainjob-jax-tpu-sdk.yaml"
TRAINJOB_ON_TPU_RUNTIME = DATA / "trainer-trainjob-jax-tpu-v5-8.yaml"
PATHWAYSJOB_CRD = DATA / "crds" / "pathwaysjob.yaml"
PATHWAYSJOB = DATA / "pathwaysjob-v4-2x2x2.yaml"

COMPUTE_CLASS = "cloud.google.com/compute-class"
JAX_PORT = 29500  # kubeflow/trainer v2.3.0 pkg/constants ContainerTrainerPort
#: What the TrainJobs of the guide set (the Kubeflow SDK's `env=`).
TRAINJOB_ENV = {"JAX_PLATFORMS": "tpu,cpu", "ENABLE_PJRT_COMPATIBILITY": "true"}


def jax_env(trainjob: str, nodes: int, defaulted: bool = True) -> dict[str, Any]:
    """What Trainer's JAX runtime writes into the trainer container (v2.3.0
    pkg/runtime/framework/plugins/jax/jax.go EnforceMLPolicy); the API server gives the fieldRef
    its apiVersion in a Job's and a Pod's template (`defaulted`), not in a JobSet's."""
    ref = {"fieldPath": f"metadata.annotations['{INDEX}']"}
    return {
        "JAX_NUM_PROCESSES": str(nodes),
        "JAX_PROCESS_ID": {"fieldRef": {"apiVersion": "v1", **ref} if defaulted else ref},
        "JAX_COORDINATOR_ADDRESS": f"{trainjob}-node-0-0.{trainjob}:{JAX_PORT}",
    }


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def runtimes(control_plane: ControlPlane, trainer_operator: Operators) -> Iterator[list[Path]]:
    """The guide's ClusterTrainingRuntimes (cluster-scoped), for this module's TrainJobs. Trainer's
    own runtime webhook admits them (it refuses a trainer Job of more than one replica)."""
    manifests = [arg for path in RUNTIMES for arg in ("-f", str(path))]
    applied = control_plane.kubectl("apply", *manifests)
    assert applied.returncode == 0, applied.stderr
    yield RUNTIMES
    control_plane.kubectl("delete", "--ignore-not-found", *manifests)


@pytest.fixture
def ns(control_plane: ControlPlane, runtimes: list[Path], namespace: str) -> str:
    """A fresh namespace under tpu-webhook, Trainer running, once its default ServiceAccount
    exists (the Job controller's Pods need it)."""
    wait_for(
        lambda: control_plane.kubectl("get", "-n", namespace, "sa", "default").returncode == 0,
        f"serviceaccount {namespace}/default",
    )
    return namespace


@pytest.fixture(scope="module")
def pathwaysjob_crd(control_plane: ControlPlane) -> Path:
    """The PathwaysJob CRD, Established (it stays installed, like the operators' CRDs)."""
    install_crds(control_plane, [PATHWAYSJOB_CRD.parent], time.monotonic() + 120)
    return PATHWAYSJOB_CRD


def edited_text(path: Path, old: str, new: str) -> str:
    """The file's text with the user's one mistake in it (`old` occurs once)."""
    text = path.read_text()
    assert text.count(old) == 1, old
    return text.replace(old, new)


def edited(path: Path, tmp_path: Path, old: str, new: str) -> Path:
    """The file with the user's one mistake in it, saved under `tmp_path`."""
    out = tmp_path / path.name
    out.write_text(edited_text(path, old, new))
    return out


def modelled_jobset(sample: Path, ns: str) -> dict[str, Any]:
    """The JobSet tests/corpus/controllers/trainer.py says Trainer makes from the TrainJob on the
    runtimes of RUNTIMES, as stored: defaulted by JobSet's webhook, then patched by tpu-webhook
    (the API server calls them in that order: `jobset-...` sorts before tpu-webhook's name)."""
    yaml = YAML(typ="safe", pure=True)
    runtimes = [yaml.load(path) for path in RUNTIMES]
    trainjob = yaml.load(sample)
    trainjob["metadata"]["namespace"] = ns
    (jobset,) = ch.children(ch.stored(trainjob), cluster=runtimes)
    return dict(admit(ch.stored(jobset), Policy(load_catalog()), ns).stored)


def get_or_none(cp: ControlPlane, ns: str, resource: str, name: str) -> Any:
    found = cp.kubectl("get", "-n", ns, resource, name, "-o", "json")
    return json.loads(found.stdout) if found.returncode == 0 else None


def denied_reviews(server: WebhookProcess, ns: str, kind: str) -> list[dict[str, Any]]:
    """tpu-webhook's denials of `kind` in `ns`, once one with and one without dry run are logged
    (the log is written in batches)."""

    def both() -> list[dict[str, Any]] | None:
        found = [r for r in reviews(server, ns) if r["kind"] == kind and r["outcome"] == "denied"]
        return found if {r["dry_run"] for r in found} == {True, False} else None

    return wait_for(both, f"{kind} denied with and without dry run", timeout=10)


# ------------------------------------------------------------------------------ TrainJob

TRAINJOBS = [
    # the TrainJob and its name: its slice in a runtime patch, or all in its runtime
    pytest.param(TRAINJOB_SDK, "jax-tpu-dist", id="sdk-runtime-patch-on-jax-distributed"),
    pytest.param(TRAINJOB_ON_TPU_RUNTIME, "jax-mnist", id="on-the-tpu-runtime-jax-tpu-v5-8"),
]


@pytest.mark.parametrize(("sample", "name"), TRAINJOBS)
def test_trainjob_on_a_v5e_2x4_slice_runs_and_its_pods_carry_jax_and_tpu_webhook_variables_once(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    ns: str,
    sample: Path,
    name: str,
) -> None:
    cp = control_plane
    result = same_verdict_dry_run_first(cp, ns, sample, "trainjob", name)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"trainjob.trainer.kubeflow.org/{name} created"]

    # Trainer's JobSet: one trainer Job of 2 Pods (numNodes), the JAX variables, no TPU ones
    jobset = wait_for(lambda: get_or_none(cp, ns, "jobset", name), f"jobset {name}")
    assert controller_of(jobset) == ("TrainJob", name)
    # ... the JobSet of the corpus's model of Trainer, once JobSet's webhook and ours patched it
    assert jobset["spec"] == modelled_jobset(sample, ns)["spec"]
    (rjob,) = jobset["spec"]["replicatedJobs"]
    assert (rjob["name"], rjob["replicas"]) == ("node", 1)
    job_spec = rjob["template"]["spec"]
    assert (job_spec["parallelism"], job_spec["completions"]) == (2, 2)
    (container,) = job_spec["template"]["spec"]["containers"]
    assert env_of(container) == {**jax_env(name, 2, defaulted=False), **TRAINJOB_ENV}
    assert {"containerPort": JAX_PORT, "protocol": "TCP"} in container["ports"]

    hosts = [f"{name}-node-0-{i}.{name}" for i in range(2)]
    (job,) = items(cp, ns, "jobs", f"{JOBSET}jobset-name={name}", 1)
    assert job["metadata"]["name"] == f"{name}-node-0"
    assert controller_of(job) == ("JobSet", name)
    assert job["spec"]["template"]["spec"]["subdomain"] == name
    assert worker_env(job["spec"]["template"]) == [job_index_env(hosts)]

    pods = items(cp, ns, "pods", f"{JOBSET}jobset-name={name}", 2)
    for pod in pods:
        assert controller_of(pod) == ("Job", f"{name}-node-0")
        assert_tpu_host(pod, "tpu-v5-lite-podslice", "2x4", 4)
        assert pod["spec"]["nodeSelector"][COMPUTE_CLASS] == "tpu-multihost-v5-8"
        (container,) = pod["spec"]["containers"]
        # Trainer's JAX variables, the user's, tpu-webhook's pair and the Job controller's index;
        # nobody else's
        assert env_of(container) == {
            **jax_env(name, 2),
            **TRAINJOB_ENV,
            **job_index_env(hosts),
            "JOB_COMPLETION_INDEX": {
                "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.labels['{INDEX}']"}
            },
        }
        # both number the hosts the same way: JAX's coordinator is host 0 of the TPU list, and
        # a Pod's JAX process id and TPU worker id are its completion index
        me = f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}"
        assert hosts[int(pod["metadata"]["annotations"][INDEX])] == me
    wait_reviewed(webhook_server, ns, {"JobSet", "Job", "Pod"})


def test_tpu_webhook_reviews_and_admits_the_trainjob_that_names_its_slice(
    control_plane: ControlPlane, webhook_server: WebhookProcess, ns: str
) -> None:
    """Depends on TrainJob in tpu-webhook's workload table: the SDK's TrainJob carries its slice
    (runtime patch, chips per node, numNodes), so the API server sends it to tpu-webhook."""
    cp, name = control_plane, "jax-tpu-dist"
    result = same_verdict_dry_run_first(cp, ns, TRAINJOB_SDK, "trainjob", name)
    assert result.returncode == 0, result.stderr
    lines = wait_reviewed(webhook_server, ns, {"TrainJob"})
    assert {r["outcome"] for r in lines if r["kind"] == "TrainJob"} == {"allowed"}


def test_trainjob_whose_nodes_are_not_its_slices_hosts_is_refused_at_the_trainjob(
    control_plane: ControlPlane, webhook_server: WebhookProcess, ns: str, tmp_path: Path
) -> None:
    """Depends on TrainJob in tpu-webhook's workload table: the SDK's TrainJob names its slice
    (the runtime patch's selectors, 4 chips per node) and its node count; the user changed the
    topology from 2x4 to 4x4 (16 chips at 4 per host: 4 hosts) and kept numNodes 2."""
    cp, name = control_plane, "jax-tpu-dist"
    topology = 'cloud.google.com/gke-tpu-topology: "{}"'
    path = edited(TRAINJOB_SDK, tmp_path, topology.format("2x4"), topology.format("4x4"))

    result = same_verdict_dry_run_first(cp, ns, path, "trainjob", name)
    assert result.returncode == 1
    error = f'Error from server (Forbidden): error when creating "{path}": '
    (line,) = [x for x in result.stderr.splitlines() if x.startswith(error)]
    assert line.startswith(error + denied(cp, webhook_server) + "spec.trainer.numNodes: "), line
    assert absent(cp, ns, "trainjob", name)
    assert get(cp, ns, "jobsets,jobs,pods")["items"] == []
    codes = {c for r in denied_reviews(webhook_server, ns, "TrainJob") for c in r["rules"]}
    assert "tpu.multihost-parallelism" in codes


# ---------------------------------------------------------------------------- PathwaysJob


def test_the_crd_stores_the_pathwaysjob_sample_with_its_defaults(
    control_plane: ControlPlane, pathwaysjob_crd: Path, namespace: str
) -> None:
    cp, name = control_plane, "pathways-trial"
    result = same_verdict_dry_run_first(cp, namespace, PATHWAYSJOB, "pathwaysjob", name)
    assert result.returncode == 0, result.stderr
    created = f"pathwaysjob.pathways-job.pathways.domain/{name} created"
    assert result.stdout.splitlines() == [created]
    stored = get(cp, namespace, "pathwaysjob", name)["spec"]
    assert stored["workers"] == [
        {
            "type": "ct4p-hightpu-4t",
            "topology": "2x2x2",
            "numSlices": 2,
            "maxSliceRestarts": 1,  # the CRD's default
            "nodeSelector": {"cloud.google.com/reservation-name": "reservation-name"},
        }
    ]
    assert stored["controller"]["template"]["spec"]["containers"][0]["name"] == "main-workload"
    # what its CRD refuses, the API server refuses (no webhook involved): a machine type not in
    # the enum
    typo = edited_text(PATHWAYSJOB, "type: ct4p-hightpu-4t", "type: ct4p-hightpu-8t")
    refused = cp.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", input=typo)
    assert refused.returncode == 1
    assert 'spec.workers[0].type: Unsupported value: "ct4p-hightpu-8t"' in refused.stderr


def test_tpu_webhook_reviews_and_admits_the_pathwaysjob_sample(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    pathwaysjob_crd: Path,
    namespace: str,
) -> None:
    """Depends on PathwaysJob in tpu-webhook's workload table (the API server calls tpu-webhook
    for PathwaysJobs once the chart registers them)."""
    cp, name = control_plane, "pathways-trial"
    result = same_verdict_dry_run_first(cp, namespace, PATHWAYSJOB, "pathwaysjob", name)
    assert result.returncode == 0, result.stderr
    lines = wait_reviewed(webhook_server, namespace, {"PathwaysJob"})
    assert {r["outcome"] for r in lines if r["kind"] == "PathwaysJob"} == {"allowed"}


def test_pathwaysjob_whose_topology_is_no_slice_of_its_machine_type_is_refused(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    pathwaysjob_crd: Path,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Depends on PathwaysJob in tpu-webhook's workload table: ct4p-hightpu-4t is TPU v4, whose
    slices are 3-D (2x2x2, 2x2x4, ...); 4x4 is a v5e/v6e shape (pathways-job's controller would
    mark the PathwaysJob Failed after it was stored: "invalid TPU topology for worker type")."""
    cp, name = control_plane, "pathways-trial"
    path = edited(PATHWAYSJOB, tmp_path, "topology: 2x2x2", "topology: 4x4")

    result = same_verdict_dry_run_first(cp, namespace, path, "pathwaysjob", name)
    assert result.returncode == 1
    error = f'Error from server (Forbidden): error when creating "{path}": '
    (line,) = [x for x in result.stderr.splitlines() if x.startswith(error)]
    assert line.startswith(error + denied(cp, webhook_server) + "spec.workers[0].topology: "), line
    assert absent(cp, namespace, "pathwaysjob", name)
    denials = denied_reviews(webhook_server, namespace, "PathwaysJob")
    codes = {code for review in denials for code in review["rules"]}
    assert "tpu.topology-invalid" in codes
