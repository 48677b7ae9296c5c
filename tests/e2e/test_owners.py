"""Owners decided at the owner, their children left to their controllers (issue 12).

Public samples from tests/corpus/ applied with `kubectl apply -f` as a user types them, against
the real JobSet, LeaderWorkerSet and KubeRay operators (`operators`) and tpu-webhook registered
with the API server (`registered`). Each good sample is first dry-run on the server (same verdict,
word for word, and nothing stored), then applied; its controller's children pass through the
webhook (its review log names their kinds) and carry the TPU worker variables of exactly one
writer: tpu-webhook on JobSet's Jobs and Pods, LWS's Pod webhook on LWS Pods, nobody on KubeRay
Pods (GKE's KubeRay TPU webhook is not installed here). A broken owner of each kind is refused at
`kubectl apply` (and its dry run) with the owner-level message, and nothing is stored.

No scheduler or kubelet runs: Pods stay Pending. Where a controller waits for a placement (LWS
with exclusive topology creates a group's workers once its leader has a node), the test does the
scheduler's one step: a Node object and a Binding, as kube-scheduler would post it.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from dev.chart import url_mode_configurations
from dev.controlplane import ControlPlane
from dev.operators import Operators
from dev.tools import REPO_ROOT
from tests.e2e.conftest import wait_until_denied
from tests.support.webhook_process import WebhookProcess
from webhook.catalog.tpu import OPT_OUT_LABEL
from webhook.policy.workloads import WORKLOADS

pytestmark = pytest.mark.e2e

T = TypeVar("T")

CORPUS = REPO_ROOT / "tests" / "corpus"
GKE_SAMPLES = CORPUS / "GoogleCloudPlatform-kubernetes-engine-samples"
XPK_V5P_8 = CORPUS / "AI-Hypercomputer-xpk" / "workload-create-v5p-8.yaml"
GEMMA3_MULTIHOST = GKE_SAMPLES / "gemma3-training-multihost-jobset-v6e-2x4.yaml"
GEMMA3_MULTISLICE = GKE_SAMPLES / "gemma3-training-multislice-jobset-v6e-2x4.yaml"
LWS_VLLM = CORPUS / "kubernetes-sigs-lws" / "vllm-multihost-lws-v5e-4x4.yaml"
LWS_PATHWAYS = GKE_SAMPLES / "jetstream-pathways-lws-v6e-4x4.yaml"
RAYCLUSTER_V4 = CORPUS / "ray-project-kuberay" / "raycluster-tpu-v4-2x2x2-multihost.yaml"
RAYJOB_V6E = GKE_SAMPLES / "rayjob-multihost-v6e-4x4.yaml"
RAYSERVICE_V6E = GKE_SAMPLES / "rayservice-vllm-multihost-v6e-4x4.yaml"
RAYCLUSTER_INVALID = (
    CORPUS
    / "ai-on-gke-kuberay-tpu-webhook"
    / "raycluster-v6e-2x4-eight-chips-two-hosts-invalid.yaml"
)

JOBSET = "jobset.sigs.k8s.io/"
LWS = "leaderworkerset.sigs.k8s.io/"
INDEX = "batch.kubernetes.io/job-completion-index"
ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY = "cloud.google.com/gke-tpu-topology"
TPU = "google.com/tpu"
#: Every variable some injector writes for a host of a slice (tpu-webhook, GKE, LWS, KubeRay's
#: TPU webhook); which of them a Pod carries tells who wrote them.
WORKER_VARIABLES = frozenset(
    {
        "TPU_WORKER_ID",
        "TPU_WORKER_HOSTNAMES",
        "TPU_NAME",
        "TPU_PROCESS_ADDRESSES",
        "TPU_PROCESS_PORT",
        "MEGASCALE_NUM_SLICES",
        "MEGASCALE_SLICE_ID",
        "MEGASCALE_COORDINATOR_ADDRESS",
    }
)
LWS_TPU_PORT = 8476  # LWS v0.8.0 pkg/utils/accelerators/tpu.go


# ------------------------------------------------------------------------------ kubectl


def wait_for(predicate: Callable[[], T | None], what: str, timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout}s")


def apply(
    cp: ControlPlane, ns: str, path: Path, *, dry_run: bool = False
) -> subprocess.CompletedProcess[str]:
    """`kubectl apply [--dry-run=server] -n NS -f PATH`."""
    dry = ["--dry-run=server"] if dry_run else []
    return cp.kubectl("apply", *dry, "-n", ns, "-f", str(path))


def get(cp: ControlPlane, ns: str, *args: str) -> Any:
    return json.loads(cp.kubectl("get", "-n", ns, *args, "-o", "json", check=True).stdout)


def absent(cp: ControlPlane, ns: str, resource: str, name: str) -> bool:
    result = cp.kubectl("get", "-n", ns, resource, name)
    return result.returncode != 0 and "NotFound" in result.stderr


def items(cp: ControlPlane, ns: str, kind: str, selector: str, count: int) -> list[Any]:
    """The `count` objects of `kind` matching `selector` once they all exist, by name."""

    def listed() -> list[Any] | None:
        found = get(cp, ns, kind, "-l", selector)["items"]
        return found if len(found) == count else None

    found = wait_for(listed, f"{count} {kind} with {selector}")
    return sorted(found, key=lambda o: o["metadata"]["name"])


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """name -> value, or -> valueFrom (a fieldRef is tpu-webhook's TPU_WORKER_ID)."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def worker_env(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The worker variables of each container of a Pod (or pod template)."""
    return [
        {k: v for k, v in env_of(c).items() if k in WORKER_VARIABLES}
        for c in pod["spec"]["containers"]
    ]


def controller_of(obj: dict[str, Any]) -> tuple[str, str]:
    (ref,) = [r for r in obj["metadata"]["ownerReferences"] if r.get("controller")]
    return ref["kind"], ref["name"]


def assert_tpu_host(pod: dict[str, Any], accelerator: str, topology: str, chips: int) -> None:
    """A Pod of a slice: its selectors and chips as the sample asks, and Pending (no scheduler)."""
    selector = pod["spec"]["nodeSelector"]
    assert (selector[ACCELERATOR], selector[TOPOLOGY]) == (accelerator, topology)
    (tpu_container,) = [
        c for c in pod["spec"]["containers"] if TPU in c["resources"].get("limits", {})
    ]
    resources = tpu_container["resources"]
    assert resources["limits"][TPU] == resources["requests"][TPU] == str(chips)
    assert pod["status"]["phase"] == "Pending"


# ---------------------------------------------------------------------- verdicts, reviews


def same_verdict_dry_run_first(
    cp: ControlPlane, ns: str, path: Path, resource: str, name: str
) -> subprocess.CompletedProcess[str]:
    """`kubectl apply --dry-run=server` then `kubectl apply`: the same exit code, warnings or
    denial word for word, the same objects (`created (server dry run)` / `created`); the dry
    run stores nothing."""
    dry = apply(cp, ns, path, dry_run=True)
    assert absent(cp, ns, resource, name), f"the dry run stored {resource}/{name}"
    real = apply(cp, ns, path)
    assert (dry.returncode, dry.stderr) == (real.returncode, real.stderr)
    assert dry.stdout.replace(" (server dry run)", "") == real.stdout
    return real


def reviews(server: WebhookProcess, ns: str) -> list[dict[str, Any]]:
    """tpu-webhook's review log lines about objects of `ns`."""
    found = []
    for line in server.logs().splitlines():
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        if entry.get("msg") == "review" and entry.get("namespace") == ns:
            found.append(entry)
    return found


def wait_reviewed(server: WebhookProcess, ns: str, kinds: set[str]) -> list[dict[str, Any]]:
    """The review lines once both endpoints have seen every kind (lines are written in batches)."""

    def seen() -> list[dict[str, Any]] | None:
        lines = reviews(server, ns)
        both = {(r["endpoint"], r["kind"]) for r in lines}
        wanted = {(e, k) for e in ("mutate", "validate") for k in kinds}
        return lines if wanted <= both else None

    return wait_for(seen, f"tpu-webhook reviews of {sorted(kinds)} in {ns}", timeout=10)


def our_configurations(cp: ControlPlane, server: WebhookProcess) -> list[dict[str, Any]]:
    """The live Mutating/Validating configurations whose webhooks call `server`, whoever
    registered them (the e2e fixture, from webhook/configs.py or the chart's rendering)."""
    at = f"127.0.0.1:{server.port}/"
    found = []
    for resource in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        listed = json.loads(cp.kubectl("get", resource, "-o", "json", check=True).stdout)
        for config in listed["items"]:
            if any(at in h["clientConfig"].get("url", "") for h in config["webhooks"]):
                found.append(config)
    return found


def denied(cp: ControlPlane, server: WebhookProcess) -> str:
    """`admission webhook "<our validating webhook of CREATEs>" denied the request: `."""
    (name,) = [
        h["name"]
        for c in our_configurations(cp, server)
        for h in c["webhooks"]
        if c["kind"] == "ValidatingWebhookConfiguration"
        and h["clientConfig"]["url"].endswith("/validate")
        and "CREATE" in h["rules"][0]["operations"]
    ]
    return f'admission webhook "{name}" denied the request: '


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture
def ns(control_plane: ControlPlane, operators: Operators, namespace: str) -> str:
    """A fresh namespace under tpu-webhook, with the operators running, once its default
    ServiceAccount exists (the controllers' Pods need it)."""
    wait_for(
        lambda: control_plane.kubectl("get", "-n", namespace, "sa", "default").returncode == 0,
        f"serviceaccount {namespace}/default",
    )
    return namespace


@pytest.fixture
def cluster_scoped(control_plane: ControlPlane) -> Iterator[list[str]]:
    """Cluster-scoped objects a test creates (`kind/name`), deleted after it."""
    created: list[str] = []
    yield created
    for ref in created:
        control_plane.kubectl("delete", ref, "--ignore-not-found", "--wait=false")


# ----------------------------------------------------------------------------- JobSet


def job_index_env(hostnames: list[str]) -> dict[str, Any]:
    """What tpu-webhook writes into each Job of a JobSet's multi-host replicatedJob."""
    return {
        "TPU_WORKER_ID": {
            "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{INDEX}']"}
        },
        "TPU_WORKER_HOSTNAMES": ",".join(hostnames),
    }


def test_single_host_jobset_from_xpk_is_admitted_and_its_job_gets_no_worker_variables(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    ns: str,
    cluster_scoped: list[str],
) -> None:
    cp = control_plane
    # the PriorityClass the JobSet names, as `xpk cluster create` installs it
    cp.kubectl("create", "priorityclass", "medium", "--value=500", check=True)
    cluster_scoped.append("priorityclass/medium")

    result = same_verdict_dry_run_first(cp, ns, XPK_V5P_8, "jobset", "golden-workload")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["jobset.jobset.x-k8s.io/golden-workload created"]

    (job,) = items(cp, ns, "jobs", f"{JOBSET}jobset-name=golden-workload", 1)
    assert job["metadata"]["name"] == "golden-workload-slice-job-0"
    assert controller_of(job) == ("JobSet", "golden-workload")
    (pod,) = items(cp, ns, "pods", f"{JOBSET}jobset-name=golden-workload", 1)
    assert controller_of(pod) == ("Job", "golden-workload-slice-job-0")
    assert_tpu_host(pod, "tpu-v5p-slice", "2x2x1", 4)
    assert pod["spec"]["hostNetwork"] is True
    # one host: no list of hosts to write (GKE's device plugin sets the single-host defaults)
    assert worker_env(job["spec"]["template"]) == worker_env(pod) == [{}]
    wait_reviewed(webhook_server, ns, {"JobSet", "Job", "Pod"})


MULTI_HOST_JOBSETS = [
    # name, replicatedJob, slices (replicas), hosts per slice
    pytest.param(GEMMA3_MULTIHOST, "jax-gemma3-train-multihost", "trainers", 1, 2, id="multi-host"),
    pytest.param(
        GEMMA3_MULTISLICE, "jax-gemma3-train-multislice", "trainers", 2, 2, id="multislice"
    ),
]


@pytest.mark.parametrize(("sample", "name", "rjob", "slices", "hosts"), MULTI_HOST_JOBSETS)
def test_multi_host_jobset_is_admitted_and_each_job_gets_its_slice_variables_from_tpu_webhook(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    ns: str,
    sample: Path,
    name: str,
    rjob: str,
    slices: int,
    hosts: int,
) -> None:
    cp = control_plane
    # the Kubernetes ServiceAccount the guide has the user create for Cloud Storage FUSE
    cp.kubectl("create", "-n", ns, "serviceaccount", "jaxserviceaccout", check=True)
    result = same_verdict_dry_run_first(cp, ns, sample, "jobset", name)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"jobset.jobset.x-k8s.io/{name} created"]
    # backoffLimit 1 in the sample: a warning, not a denial
    assert "Warning: spec.replicatedJobs[0].template.spec.backoffLimit" in result.stderr

    # nothing in the JobSet itself: the variables differ per Job, written when each is created
    stored = get(cp, ns, "jobset", name)["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert worker_env(stored["template"]) == [{}]

    jobs = items(cp, ns, "jobs", f"{JOBSET}jobset-name={name}", slices)
    slice_hosts = [[f"{name}-{rjob}-{j}-{i}.{name}" for i in range(hosts)] for j in range(slices)]
    for j, job in enumerate(jobs):
        assert job["metadata"]["name"] == f"{name}-{rjob}-{j}"
        assert job["spec"]["template"]["spec"]["subdomain"] == name  # JobSet's headless Service
        assert worker_env(job["spec"]["template"]) == [job_index_env(slice_hosts[j])]

    pods = items(cp, ns, "pods", f"{JOBSET}jobset-name={name}", slices * hosts)
    for pod in pods:
        _, job_name = controller_of(pod)
        j = int(job_name.rsplit("-", 1)[1])
        assert_tpu_host(pod, "tpu-v6e-slice", "2x4", 4)
        # tpu-webhook's pair and nothing else: no LWS-style TPU_NAME/TPU_PROCESS_*, no
        # MEGASCALE_* (their injection is opt-in; GKE writes them into JobSet children)
        assert worker_env(pod) == [job_index_env(slice_hosts[j])]
        # the list names this Pod at its own index: <jobset>-<rjob>-<j>-<i>.<subdomain>
        me = f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}"
        assert slice_hosts[j][int(pod["metadata"]["annotations"][INDEX])] == me
    wait_reviewed(webhook_server, ns, {"JobSet", "Job", "Pod"})


# ---------------------------------------------------------------------- LeaderWorkerSet


def lws_env(
    ns: str, lws: str, group: int, size: int, worker: int, hosts: list[str], tpu_id: int
) -> dict[str, Any]:
    """Everything LWS's Pod webhook writes on a TPU container of a group (literal values)."""
    leader = f"{lws}-{group}"
    return {
        "LWS_LEADER_ADDRESS": f"{leader}.{lws}.{ns}",
        "LWS_GROUP_SIZE": str(size),
        "LWS_WORKER_INDEX": str(worker),
        "TPU_WORKER_HOSTNAMES": ",".join(hosts),
        "TPU_WORKER_ID": str(tpu_id),
        "TPU_NAME": leader,
        "TPU_PROCESS_ADDRESSES": ",".join(f"{h}:{LWS_TPU_PORT}" for h in hosts),
        "TPU_PROCESS_PORT": str(LWS_TPU_PORT),
    }


VLLM_PODS = [f"vllm-{g}{'' if i == 0 else f'-{i}'}" for g in (0, 1) for i in range(4)]


def assert_vllm_groups_carry_lws_variables_only(cp: ControlPlane, ns: str) -> None:
    """LWS's vLLM TPU sample: 2 groups of a leader + 3 workers, all with 4 chips of a v5e 4x4."""
    sets = items(cp, ns, "statefulsets", f"{LWS}name=vllm", 3)
    assert [s["metadata"]["name"] for s in sets] == ["vllm", "vllm-0", "vllm-1"]
    for sts in sets:  # no worker variables in LWS's StatefulSets: LWS writes them per Pod
        assert worker_env(sts["spec"]["template"]) == [{}], sts["metadata"]["name"]
    pods = items(cp, ns, "pods", f"{LWS}name=vllm", 8)
    assert [p["metadata"]["name"] for p in pods] == sorted(VLLM_PODS)
    for pod in pods:
        group = int(pod["metadata"]["labels"][f"{LWS}group-index"])
        worker = int(pod["metadata"]["labels"][f"{LWS}worker-index"])
        hosts = [f"vllm-{group}.vllm"] + [f"vllm-{group}-{i}.vllm" for i in (1, 2, 3)]
        (container,) = pod["spec"]["containers"]
        assert env_of(container) == {
            **lws_env(ns, "vllm", group, 4, worker, hosts, worker),
            "HF_TOKEN": "hf_REDACTED_TOKEN",  # the sample's own
        }, pod["metadata"]["name"]
        assert_tpu_host(pod, "tpu-v5-lite-podslice", "4x4", 4)


def pod_mutations(server: WebhookProcess, ns: str, pods: list[str]) -> dict[str, int]:
    """How often tpu-webhook's mutating endpoint was called in the admission that created each
    Pod: the mutations right before its last validation, in the order the server answered them
    (a reinvocation adds one there; a controller's earlier failed create ends before it, and the
    API server gives every call a new uid, so uids cannot tell them apart)."""

    def counted() -> dict[str, int] | None:
        lines = [r for r in reviews(server, ns) if r["kind"] == "Pod"]
        found: dict[str, int] = {}
        for pod in pods:
            endpoints = [r["endpoint"] for r in lines if r["name"] == pod]
            if "validate" not in endpoints:
                return None
            last = len(endpoints) - 1 - endpoints[::-1].index("validate")
            before = endpoints[:last]
            found[pod] = len(before) - len("".join(e[0] for e in before).rstrip("m"))
        return found

    return wait_for(counted, f"tpu-webhook reviews of {pods}", timeout=10)


def test_lws_with_chip_requesting_leader_gets_lws_tpu_variables_and_none_from_tpu_webhook(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    operators: Operators,
    ns: str,
) -> None:
    cp = control_plane
    result = same_verdict_dry_run_first(cp, ns, LWS_VLLM, "leaderworkerset", "vllm")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "leaderworkerset.leaderworkerset.x-k8s.io/vllm created",
        "service/vllm-leader created",
    ]
    assert_vllm_groups_carry_lws_variables_only(cp, ns)
    wait_reviewed(webhook_server, ns, {"LeaderWorkerSet", "StatefulSet", "Pod"})

    # The API server calls mutating configurations in name order: LWS's before ours, so
    # tpu-webhook sees each Pod once, after LWS's Pod webhook wrote its variables.
    (lws_mutating,) = [
        c["metadata"]["name"]
        for c in operators.webhook_configurations
        if c["kind"] == "MutatingWebhookConfiguration" and c["metadata"]["name"].startswith("lws-")
    ]
    (ours,) = [
        c["metadata"]["name"]
        for c in our_configurations(cp, webhook_server)
        if c["kind"] == "MutatingWebhookConfiguration"
    ]
    assert lws_mutating < ours
    assert pod_mutations(webhook_server, ns, VLLM_PODS) == {p: 1 for p in VLLM_PODS}


FIRST = "0-tpu-webhook-first"  # sorts before jobset-* and lws-* configurations


@pytest.fixture
def ns_tpu_webhook_first(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    operators: Operators,
    registered: object,
) -> Iterator[str]:
    """A namespace where tpu-webhook's mutating webhook runs before LWS's: the session's
    configurations skip it (opt-out label on the namespace) and copies of them named to sort
    first serve it alone."""
    cp = control_plane
    name = f"first-{uuid.uuid4().hex[:8]}"
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {OPT_OUT_LABEL: "true"}},
    }
    copies = []
    for config in our_configurations(cp, webhook_server):
        hooks = config["webhooks"]
        for hook in hooks:
            selector = hook.setdefault("namespaceSelector", {})
            kept = [e for e in selector.get("matchExpressions", []) if e["key"] != OPT_OUT_LABEL]
            only = {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [name]}
            selector["matchExpressions"] = [*kept, only]
        copies.append(
            {
                "apiVersion": config["apiVersion"],
                "kind": config["kind"],
                "metadata": {"name": f"{FIRST}-{name}"},
                "webhooks": hooks,
            }
        )
    cp.kubectl("apply", "-f", "-", input=json.dumps(namespace), check=True)
    try:
        cp.kubectl("apply", "-f", "-", input="\n".join(map(json.dumps, copies)), check=True)
        # the copies are live (the session's configurations skip the namespace)
        wait_until_denied(cp, name)
        wait_until_patched(cp, name)
        wait_for(
            lambda: cp.kubectl("get", "-n", name, "sa", "default").returncode == 0,
            f"serviceaccount {name}/default",
        )
        yield name
    finally:
        for copy in copies:
            cp.kubectl(
                "delete", copy["kind"].lower(), copy["metadata"]["name"], "--ignore-not-found"
            )
        cp.kubectl("delete", "namespace", name, "--wait=false")


PATCH_CANARY = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "tpu-webhook-mutating-canary"},
    "spec": {
        "nodeSelector": {ACCELERATOR: "tpu-v5-lite-podslice", TOPOLOGY: "2x2"},
        "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {TPU: "4"}}}],
    },
}


def wait_until_patched(cp: ControlPlane, ns: str) -> None:
    """Until a dry-run TPU Pod comes back with the TPU ports tpu-webhook's mutation adds."""

    def patched() -> bool:
        result = cp.kubectl(
            "create",
            "--dry-run=server",
            "-n",
            ns,
            "-o",
            "json",
            "-f",
            "-",
            input=json.dumps(PATCH_CANARY),
        )
        if result.returncode != 0:
            return False
        ports = json.loads(result.stdout)["spec"]["containers"][0].get("ports", [])
        return 8471 in [p["containerPort"] for p in ports]

    wait_for(patched, f"tpu-webhook's mutating webhook in {ns}")


def test_lws_pods_are_the_same_when_tpu_webhook_mutates_before_lws(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    operators: Operators,
    ns_tpu_webhook_first: str,
) -> None:
    cp, ns = control_plane, ns_tpu_webhook_first
    names = sorted(
        c["metadata"]["name"]
        for c in json.loads(
            cp.kubectl("get", "mutatingwebhookconfigurations", "-o", "json", check=True).stdout
        )["items"]
    )
    assert names[0] == f"{FIRST}-{ns}", names  # ours is called first

    result = same_verdict_dry_run_first(cp, ns, LWS_VLLM, "leaderworkerset", "vllm")
    assert result.returncode == 0, result.stderr
    assert_vllm_groups_carry_lws_variables_only(cp, ns)
    # Each Pod twice: first before LWS's Pod webhook (nothing to add: the Pod belongs to a
    # StatefulSet of an LWS), then reinvoked (IfNeeded) after LWS changed it: still nothing.
    assert pod_mutations(webhook_server, ns, VLLM_PODS) == {p: 2 for p in VLLM_PODS}


def test_lws_with_chipless_leader_gets_lws_tpu_variables_on_its_workers_only(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    ns: str,
    cluster_scoped: list[str],
) -> None:
    cp, lws = control_plane, "jetstream-pathways"
    result = same_verdict_dry_run_first(cp, ns, LWS_PATHWAYS, "leaderworkerset", lws)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"leaderworkerset.leaderworkerset.x-k8s.io/{lws} created",
        "service/jetstream-svc created",
    ]
    (leader,) = items(cp, ns, "pods", f"{LWS}name={lws}", 1)
    assert leader["metadata"]["name"] == f"{lws}-0"
    # four containers, no chips: LWS's group variables on each, no worker variables anywhere
    assert worker_env(leader) == [{}, {}, {}, {}]
    assert env_of(leader["spec"]["containers"][0]) == {
        "LWS_LEADER_ADDRESS": f"{lws}-0.{lws}.{ns}",
        "LWS_GROUP_SIZE": "5",
        "LWS_WORKER_INDEX": "0",
    }
    # The sample asks for exclusive placement per node pool: LWS creates the group's workers
    # once the leader has a node. Without a scheduler, the test posts the Binding it would.
    assert absent(cp, ns, "statefulset", f"{lws}-0")
    pool, node = "tpu-v6e-4x4-pool", f"tpu-v6e-4x4-{ns}"
    cluster_scoped.append(f"node/{node}")
    bind(
        cp,
        ns,
        f"{lws}-0",
        node,
        {"cloud.google.com/gke-nodepool": pool, ACCELERATOR: "tpu-v6e-slice", TOPOLOGY: "4x4"},
    )

    workers = items(cp, ns, "pods", f"{LWS}name={lws},{LWS}worker-index!=0", 4)
    hosts = [f"{lws}-0-{i}.{lws}" for i in (1, 2, 3, 4)]
    for worker, pod in enumerate(workers, start=1):
        assert pod["metadata"]["name"] == f"{lws}-0-{worker}"
        (container,) = pod["spec"]["containers"]
        # the leader is no host: ids 0..3 over the 4 workers, hostnames of the workers only
        assert env_of(container) == lws_env(ns, lws, 0, 5, worker, hosts, worker - 1)
        assert_tpu_host(pod, "tpu-v6e-slice", "4x4", 4)
        assert pod["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] == pool
    wait_reviewed(webhook_server, ns, {"LeaderWorkerSet", "StatefulSet", "Pod"})


def bind(cp: ControlPlane, ns: str, pod: str, node: str, labels: dict[str, str]) -> None:
    """Create a Node (no kubelet behind it) and bind `pod` to it, as kube-scheduler does."""
    node_object = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}}
    cp.kubectl("apply", "-f", "-", input=json.dumps(node_object), check=True)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    cp.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(binding), check=True)
    assert get(cp, ns, "pod", pod)["spec"]["nodeName"] == node


# ---------------------------------------------------------------------------- KubeRay


def test_multi_host_raycluster_is_admitted_and_its_workers_get_no_worker_variables(
    control_plane: ControlPlane, webhook_server: WebhookProcess, ns: str
) -> None:
    cp, name = control_plane, "raycluster-tpu-v4-multihost"
    result = same_verdict_dry_run_first(cp, ns, RAYCLUSTER_V4, "raycluster", name)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"raycluster.ray.io/{name} created"]

    workers = items(cp, ns, "pods", f"ray.io/cluster={name},ray.io/node-type=worker", 2)
    for pod in workers:
        assert controller_of(pod) == ("RayCluster", name)
        assert_tpu_host(pod, "tpu-v4-podslice", "2x2x2", 4)
        # KubeRay's own TPU webhook (GKE add-on) would write them; it is not installed here,
        # and tpu-webhook leaves them to it
        assert worker_env(pod) == [{}]
    (head,) = items(cp, ns, "pods", f"ray.io/cluster={name},ray.io/node-type=head", 1)
    assert worker_env(head) == [{}]

    lines = wait_reviewed(webhook_server, ns, {"RayCluster", "Pod"})
    # the head requests no chips and names no TPU selector: matchConditions keep it away
    assert not [r for r in lines if r["name"].startswith(f"{name}-head")]


RAY_OWNERS = [
    # sample, kind, name, the ServiceAccounts its guide has the user create
    pytest.param(RAYJOB_V6E, "RayJob", "v6e-16-job", (), id="rayjob"),
    pytest.param(
        RAYSERVICE_V6E, "RayService", "vllm-tpu-multihost", ("ray-tpu-sa",), id="rayservice"
    ),
]


@pytest.mark.parametrize(("sample", "kind", "name", "accounts"), RAY_OWNERS)
def test_multi_host_ray_owner_is_admitted_and_the_workers_of_its_raycluster_get_no_worker_variables(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    ns: str,
    sample: Path,
    kind: str,
    name: str,
    accounts: tuple[str, ...],
) -> None:
    cp = control_plane
    for account in accounts:
        cp.kubectl("create", "-n", ns, "serviceaccount", account, check=True)
    result = same_verdict_dry_run_first(cp, ns, sample, kind.lower(), name)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{kind.lower()}.ray.io/{name} created"]

    # KubeRay makes a RayCluster from the embedded spec, named <name>-<random>
    origin = f"ray.io/originated-from-crd={kind},ray.io/originated-from-cr-name={name}"
    (cluster,) = items(cp, ns, "rayclusters", origin, 1)
    assert controller_of(cluster) == (kind, name)
    cluster_name = cluster["metadata"]["name"]
    selector = f"ray.io/cluster={cluster_name},ray.io/node-type=worker"
    for pod in items(cp, ns, "pods", selector, 4):  # numOfHosts 4, one replica
        assert controller_of(pod) == ("RayCluster", cluster_name)
        assert_tpu_host(pod, "tpu-v6e-slice", "4x4", 4)
        assert worker_env(pod) == [{}]
    wait_reviewed(webhook_server, ns, {kind, "RayCluster", "Pod"})


# --------------------------------------------------------------------------- broken owners

FOUR_HOSTS = "4x4 = 16 chips at 4 per host needs 4 hosts"
BROKEN = [
    # sample, the user's one mistake in it (text, replacement; the same text where the
    # sample is broken as published), kind, resource, name, what kubectl creates from the
    # rest of the file, the denial
    pytest.param(
        GEMMA3_MULTIHOST,
        (f"{TOPOLOGY}: 2x4", f"{TOPOLOGY}: 4x4"),
        "JobSet",
        "jobset",
        "jax-gemma3-train-multihost",
        [],
        "["
        f"spec.replicatedJobs[0].template.spec.parallelism: Invalid value: 2: {FOUR_HOSTS}; "
        "set parallelism and completions to 4, "
        f"spec.replicatedJobs[0].template.spec.completions: Invalid value: 2: {FOUR_HOSTS}; "
        "set parallelism and completions to 4]",
        id="jobset-parallelism-2-on-a-4-host-slice",
    ),
    pytest.param(
        LWS_VLLM,
        ("size: 4", "size: 2"),
        "LeaderWorkerSet",
        "leaderworkerset",
        "vllm",
        ["service/vllm-leader created"],
        f"spec.leaderWorkerTemplate.size: Invalid value: 2: {FOUR_HOSTS}; "
        "the leader requests chips and is host 0, so set size to 4",
        id="lws-size-2-on-a-4-host-slice",
    ),
    pytest.param(
        LWS_PATHWAYS,
        ("size: 5", "size: 4"),
        "LeaderWorkerSet",
        "leaderworkerset",
        "jetstream-pathways",
        ["service/jetstream-svc created"],
        f"spec.leaderWorkerTemplate.size: Invalid value: 4: {FOUR_HOSTS}; "
        "the leader requests no chips: the leader and 4 workers, so set size to 5",
        id="lws-chipless-leader-counted-as-a-host",
    ),
    pytest.param(
        RAYCLUSTER_INVALID,
        ("numOfHosts: 2", "numOfHosts: 2"),  # as published
        "RayCluster",
        "raycluster",
        "tpu-v6e-invalid-topology",
        [],
        "spec.workerGroupSpecs[0].numOfHosts: Invalid value: 2: "
        "2x4 = 8 chips at 8 per host needs 1 host; set numOfHosts to 1",
        id="raycluster-numofhosts-2-on-a-1-host-slice",
    ),
    pytest.param(
        RAYJOB_V6E,
        ("numOfHosts: 4", "numOfHosts: 2"),
        "RayJob",
        "rayjob",
        "v6e-16-job",
        [],
        f"spec.rayClusterSpec.workerGroupSpecs[0].numOfHosts: Invalid value: 2: {FOUR_HOSTS}; "
        "set numOfHosts to 4",
        id="rayjob-numofhosts-2-on-a-4-host-slice",
    ),
]


@pytest.mark.parametrize(
    ("sample", "edit", "kind", "resource", "name", "created", "message"), BROKEN
)
def test_broken_owner_is_refused_at_kubectl_apply_with_the_owner_level_message(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    ns: str,
    tmp_path: Path,
    sample: Path,
    edit: tuple[str, str],
    kind: str,
    resource: str,
    name: str,
    created: list[str],
    message: str,
) -> None:
    cp = control_plane
    text = sample.read_text()
    assert text.count(edit[0]) == 1, edit
    path = tmp_path / sample.name
    path.write_text(text.replace(*edit))

    result = same_verdict_dry_run_first(cp, ns, path, resource, name)
    assert result.returncode == 1
    error = f'Error from server (Forbidden): error when creating "{path}": '
    assert error + denied(cp, webhook_server) + message in result.stderr.splitlines()
    assert result.stdout.splitlines() == created

    # nothing stored: not the owner, nothing its controller would have made
    assert absent(cp, ns, resource, name)
    assert get(cp, ns, "jobs,statefulsets,pods,rayclusters")["items"] == []

    def denials() -> set[bool] | None:
        lines = reviews(webhook_server, ns)
        seen = {r["dry_run"] for r in lines if r["kind"] == kind and r["outcome"] == "denied"}
        return seen if seen == {True, False} else None

    assert wait_for(denials, f"{kind} denied with and without dry run", timeout=10)


# ------------------------------------------------------------------------ orphaning deletes
#
# `kubectl delete <owner> --cascade=orphan`: the API server puts the `orphan` finalizer on the
# owner, the garbage collector PATCHes every dependent to drop its ownerReference (an UPDATE of
# a TPU workload whose spec does not change), then removes the finalizer. A refused PATCH
# stalls the delete for good (the issue that made UPDATEs of unchanged specs allowed, and
# never sent).

#: The garbage collector learns of a CRD's resources on its periodic discovery sync (every
#: 30 s): the first orphaning delete of a kind after its CRD was installed waits for it (about
#: 10 s measured here), later ones take well under a second.
ORPHAN_BOUND_S = 60.0
#: Where an owner's dependents are looked for (an LWS owns StatefulSets, a Service and
#: ControllerRevisions; a RayCluster its Pods and Services).
DEPENDENT_KINDS = "all,controllerrevisions,configmaps"
ORPHANED = [
    # sample, resource, name, the Pods its controller makes, kinds among its dependents
    pytest.param(
        LWS_VLLM,
        "leaderworkerset",
        "vllm",
        f"{LWS}name=vllm",
        8,
        {"StatefulSet", "Service"},
        id="leaderworkerset",
    ),
    pytest.param(
        RAYCLUSTER_V4,
        "raycluster",
        "raycluster-tpu-v4-multihost",
        "ray.io/cluster=raycluster-tpu-v4-multihost",
        3,
        {"Pod", "Service"},
        id="raycluster",
    ),
]


def dependents(cp: ControlPlane, ns: str, uid: str) -> dict[str, list[str]]:
    """`Kind/name` of every object of `ns` that names `uid` among its ownerReferences ->
    the uids it names."""
    found = owner_uids(cp, ns)
    return {key: owners for key, owners in found.items() if uid in owners}


def owner_uids(cp: ControlPlane, ns: str) -> dict[str, list[str]]:
    """`Kind/name` -> the uids of its ownerReferences, for every object of DEPENDENT_KINDS."""
    return {
        f"{o['kind']}/{o['metadata']['name']}": [
            r["uid"] for r in o["metadata"].get("ownerReferences") or []
        ]
        for o in get(cp, ns, DEPENDENT_KINDS)["items"]
    }


@dataclass
class Orphaned:
    """An owner deleted with --cascade=orphan."""

    uid: str
    before: dict[str, list[str]]  # its dependents -> their owners' uids, before the delete
    after: dict[str, list[str]]  # the same objects (those still there) afterwards
    seconds: float  # `kubectl delete` waits until the owner is gone
    reviews_before: int  # tpu-webhook's review lines of the namespace before the delete


def orphan_owner(
    cp: ControlPlane,
    server: WebhookProcess,
    ns: str,
    sample: Path,
    resource: str,
    name: str,
    pods: tuple[str, int],
) -> Orphaned:
    """Apply the sample, wait for its controller's Pods, delete the owner with --cascade=orphan."""
    applied = apply(cp, ns, sample)
    assert applied.returncode == 0, applied.stderr
    items(cp, ns, "pods", *pods)
    uid = get(cp, ns, resource, name)["metadata"]["uid"]
    before = dependents(cp, ns, uid)
    time.sleep(1)  # the review log is written in batches: count what came before the delete
    reviews_before = len(reviews(server, ns))
    began = time.monotonic()
    deleted = cp.kubectl(
        "delete", "-n", ns, resource, name, "--cascade=orphan", "--timeout=120s", timeout=150
    )
    seconds = time.monotonic() - began
    assert deleted.returncode == 0, deleted.stderr
    assert absent(cp, ns, resource, name)
    after = {key: owners for key, owners in owner_uids(cp, ns).items() if key in before}
    return Orphaned(uid, before, after, seconds, reviews_before)


def updates_during(server: WebhookProcess, ns: str, orphaned: Orphaned) -> dict[str, set[str]]:
    """The owner's dependents -> the outcomes of tpu-webhook's UPDATE reviews of them since the
    delete began."""
    time.sleep(1)  # the review log is written in batches
    seen: dict[str, set[str]] = {}
    for review in reviews(server, ns)[orphaned.reviews_before :]:
        key = f"{review['kind']}/{review['name']}"
        if review["operation"] == "UPDATE" and key in orphaned.before:
            seen.setdefault(key, set()).add(review["outcome"])
    return seen


def assert_orphaned(orphaned: Orphaned, kinds: set[str]) -> None:
    assert {key.split("/")[0] for key in orphaned.before} >= kinds
    assert orphaned.seconds < ORPHAN_BOUND_S
    # every dependent is still there, and only the deleted owner's reference is gone
    assert orphaned.after == {
        key: [o for o in owners if o != orphaned.uid] for key, owners in orphaned.before.items()
    }


@pytest.mark.parametrize(("sample", "resource", "name", "selector", "count", "kinds"), ORPHANED)
def test_an_orphaning_delete_of_a_tpu_owner_completes_and_leaves_its_children_unowned(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    ns: str,
    deletion_figures: dict[str, str],
    sample: Path,
    resource: str,
    name: str,
    selector: str,
    count: int,
    kinds: set[str],
) -> None:
    cp = control_plane
    orphaned = orphan_owner(cp, webhook_server, ns, sample, resource, name, (selector, count))
    deletion_figures[f"{resource} --cascade=orphan, matchConditions on"] = (
        f"{orphaned.seconds:.1f} s ({len(orphaned.before)} dependents)"
    )
    assert_orphaned(orphaned, kinds)
    # the garbage collector's PATCHes leave the spec as it was: never sent to tpu-webhook
    assert updates_during(webhook_server, ns, orphaned) == {}
    assert len(items(cp, ns, "pods", selector, count)) == count


@pytest.fixture
def ns_every_update(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    operators: Operators,
    registered: object,
) -> Iterator[str]:
    """A namespace served by the chart's configurations rendered with
    `webhook.matchConditions.enabled=false` (every CREATE and UPDATE of the registered kinds is
    sent, the server decides), limited to it; the session's configurations skip it (opt-out
    label on the namespace)."""
    cp = control_plane
    name = f"all-updates-{uuid.uuid4().hex[:8]}"
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {OPT_OUT_LABEL: "true"}},
    }
    configurations = url_mode_configurations(
        webhook_server.url,
        webhook_server.ca_file.read_bytes(),
        release=name,
        extra_values=["webhook.matchConditions.enabled=false"],
    )
    for configuration in configurations:
        for hook in configuration["webhooks"]:
            assert "matchConditions" not in hook
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": name}}
    manifest = "\n".join(json.dumps(c) for c in configurations)
    cp.kubectl("apply", "-f", "-", input=json.dumps(namespace), check=True)
    try:
        cp.kubectl("apply", "-f", "-", input=manifest, check=True)
        wait_until_denied(cp, name)
        wait_for(
            lambda: cp.kubectl("get", "-n", name, "sa", "default").returncode == 0,
            f"serviceaccount {name}/default",
        )
        yield name
    finally:
        cp.kubectl("delete", "--ignore-not-found", "-f", "-", input=manifest)
        cp.kubectl("delete", "namespace", name, "--wait=false")


@pytest.mark.parametrize(("sample", "resource", "name", "selector", "count", "kinds"), ORPHANED)
def test_an_orphaning_delete_completes_when_the_server_decides_every_update(
    control_plane: ControlPlane,
    webhook_server: WebhookProcess,
    ns_every_update: str,
    deletion_figures: dict[str, str],
    sample: Path,
    resource: str,
    name: str,
    selector: str,
    count: int,
    kinds: set[str],
) -> None:
    cp, ns = control_plane, ns_every_update
    orphaned = orphan_owner(cp, webhook_server, ns, sample, resource, name, (selector, count))
    deletion_figures[f"{resource} --cascade=orphan, matchConditions off"] = (
        f"{orphaned.seconds:.1f} s ({len(orphaned.before)} dependents)"
    )
    assert_orphaned(orphaned, kinds)
    # the garbage collector's PATCH of each dependent of a kind tpu-webhook is registered for
    # reached it, and was allowed (its spec is unchanged)
    workload_kinds = {w.kind for w in WORKLOADS.values()}
    sent = {key for key in orphaned.before if key.split("/")[0] in workload_kinds}
    assert sent
    seen = updates_during(webhook_server, ns, orphaned)
    assert set(seen) >= sent
    assert all(outcomes == {"allowed"} for outcomes in seen.values())
