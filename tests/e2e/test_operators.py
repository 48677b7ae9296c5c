"""The real JobSet, LeaderWorkerSet and KubeRay operators create their children.

Smoke scenarios typed as a user would (`kubectl apply -f -`, `kubectl get -o json`), with
JobSet's and LWS's own webhooks on (url mode, see tests/support/operators.py). There is
no scheduler or kubelet: Pods stay Pending, so what is asserted is what the controllers
and admission create. The namespaces opt out of tpu-webhook (`tpu-webhook.io/ignore`),
which another test of the session may have registered: these tests are about the
operators alone.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from dev.controlplane import ControlPlane
from tests.support.operators import Operators

pytestmark = pytest.mark.e2e

T = TypeVar("T")

JOBSET = "jobset.sigs.k8s.io/"
LWS = "leaderworkerset.sigs.k8s.io/"
INDEX = "batch.kubernetes.io/job-completion-index"


def wait_for(predicate: Callable[[], T | None], what: str, timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout}s")


@pytest.fixture
def ns(control_plane: ControlPlane, operators: Operators) -> Iterator[str]:
    name = f"ops-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", name, check=True)
    control_plane.kubectl("label", "namespace", name, "tpu-webhook.io/ignore=true", check=True)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false")


def apply(cp: ControlPlane, ns: str, manifest: str) -> str:
    result = cp.kubectl("apply", "-n", ns, "-f", "-", input=manifest)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def get(cp: ControlPlane, ns: str, *args: str) -> Any:
    return json.loads(cp.kubectl("get", "-n", ns, *args, "-o", "json", check=True).stdout)


def items(cp: ControlPlane, ns: str, kind: str, selector: str, count: int) -> list[Any]:
    """The `count` objects of `kind` matching `selector` once they all exist, by name."""

    def listed() -> list[Any] | None:
        found = get(cp, ns, kind, "-l", selector)["items"]
        return found if len(found) == count else None

    found = wait_for(listed, f"{count} {kind} with {selector}")
    return sorted(found, key=lambda o: o["metadata"]["name"])


def env_of(pod: dict[str, Any], container: int = 0) -> dict[str, str]:
    env = pod["spec"]["containers"][container].get("env", [])
    return {e["name"]: e.get("value", "") for e in env}


def controller_of(obj: dict[str, Any]) -> tuple[str, str]:
    (ref,) = [r for r in obj["metadata"]["ownerReferences"] if r.get("controller")]
    return ref["kind"], ref["name"]


# ----------------------------------------------------------------------------- JobSet

JOBSET_SMOKE = """\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: smoke
spec:
  replicatedJobs:
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 2
        completions: 2
        backoffLimit: 0
        template:
          spec:
            containers:
            - name: main
              image: busybox
              command: ["sleep", "60"]
"""


def test_jobset_creates_indexed_child_jobs_a_headless_service_and_pods(
    control_plane: ControlPlane, ns: str
) -> None:
    assert apply(control_plane, ns, JOBSET_SMOKE) == "jobset.jobset.x-k8s.io/smoke created"

    # JobSet's webhook defaulted what its controller relies on
    stored = get(control_plane, ns, "jobset", "smoke")["spec"]
    job_template = stored["replicatedJobs"][0]["template"]["spec"]
    assert job_template["completionMode"] == "Indexed"
    assert job_template["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert stored["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert stored["successPolicy"] == {"operator": "All"}

    jobs = items(control_plane, ns, "jobs", f"{JOBSET}jobset-name=smoke", 2)
    assert [j["metadata"]["name"] for j in jobs] == ["smoke-workers-0", "smoke-workers-1"]
    for index, job in enumerate(jobs):
        labels = job["metadata"]["labels"]
        assert controller_of(job) == ("JobSet", "smoke")
        assert labels[f"{JOBSET}replicatedjob-name"] == "workers"
        assert labels[f"{JOBSET}replicatedjob-replicas"] == "2"
        assert labels[f"{JOBSET}global-replicas"] == "2"
        assert labels[f"{JOBSET}job-index"] == str(index)
        assert labels[f"{JOBSET}job-global-index"] == str(index)
        assert job["metadata"]["annotations"][f"{JOBSET}job-index"] == str(index)
        assert job["spec"]["completionMode"] == "Indexed"
        assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (2, 2)
        assert job["spec"]["template"]["spec"]["subdomain"] == "smoke"
        assert job["spec"]["template"]["metadata"]["labels"][f"{JOBSET}job-index"] == str(index)

    service = get(control_plane, ns, "service", "smoke")
    assert controller_of(service) == ("JobSet", "smoke")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {f"{JOBSET}jobset-name": "smoke"}

    pods = items(control_plane, ns, "pods", f"{JOBSET}jobset-name=smoke", 4)
    by_host = {p["spec"]["hostname"]: p for p in pods}
    # the Job controller names each Pod's host <job>-<completion index>
    assert sorted(by_host) == [f"smoke-workers-{j}-{i}" for j in (0, 1) for i in (0, 1)]
    for host, pod in by_host.items():
        job_index, completion_index = host.split("-")[-2:]
        assert pod["spec"]["subdomain"] == "smoke"
        assert controller_of(pod) == ("Job", f"smoke-workers-{job_index}")
        assert pod["metadata"]["labels"][f"{JOBSET}job-index"] == job_index
        assert pod["metadata"]["annotations"][INDEX] == completion_index
        assert pod["metadata"]["annotations"][f"{JOBSET}jobset-name"] == "smoke"
        assert pod["status"]["phase"] == "Pending"


# ---------------------------------------------------------------------- LeaderWorkerSet

LWS_SMOKE = """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: smoke
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 3
    workerTemplate:
      spec:
        containers:
        - name: main
          image: busybox
          command: ["sleep", "60"]
"""


def test_lws_creates_a_leader_statefulset_and_a_worker_statefulset_per_group(
    control_plane: ControlPlane, ns: str
) -> None:
    assert apply(control_plane, ns, LWS_SMOKE) == (
        "leaderworkerset.leaderworkerset.x-k8s.io/smoke created"
    )
    # LWS's webhook defaulted the rest of the spec
    spec = get(control_plane, ns, "lws", "smoke")["spec"]
    assert spec["networkConfig"] == {"subdomainPolicy": "Shared"}
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"

    sets = items(control_plane, ns, "statefulsets", f"{LWS}name=smoke", 3)
    leader, *workers = sets  # "smoke", "smoke-0", "smoke-1"
    assert leader["metadata"]["name"] == "smoke"
    assert controller_of(leader) == ("LeaderWorkerSet", "smoke")
    assert leader["spec"]["replicas"] == 2
    # Parallel: every Pod is created without waiting for the previous one to be Ready
    assert leader["spec"]["podManagementPolicy"] == "Parallel"
    assert leader["spec"]["serviceName"] == "smoke"
    assert [w["metadata"]["name"] for w in workers] == ["smoke-0", "smoke-1"]
    for group, worker in enumerate(workers):
        assert controller_of(worker) == ("Pod", f"smoke-{group}")  # owned by its leader Pod
        assert worker["spec"]["replicas"] == 2  # size - 1
        assert worker["spec"]["ordinals"] == {"start": 1}
        assert worker["spec"]["podManagementPolicy"] == "Parallel"
        assert worker["metadata"]["labels"][f"{LWS}group-index"] == str(group)

    service = get(control_plane, ns, "service", "smoke")
    assert service["spec"]["clusterIP"] == "None"

    pods = items(control_plane, ns, "pods", f"{LWS}name=smoke", 6)
    assert [p["metadata"]["name"] for p in pods] == [
        "smoke-0",
        "smoke-0-1",
        "smoke-0-2",
        "smoke-1",
        "smoke-1-1",
        "smoke-1-2",
    ]
    for pod in pods:
        _, group, *ordinal = pod["metadata"]["name"].split("-")  # smoke-<group>[-<worker>]
        worker = ordinal[0] if ordinal else "0"
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        assert labels[f"{LWS}group-index"] == group
        assert labels[f"{LWS}worker-index"] == worker
        assert annotations[f"{LWS}size"] == "3"
        assert pod["spec"]["subdomain"] == "smoke"
        # LWS's Pod webhook: the group's variables on every container
        assert env_of(pod) == {
            "LWS_LEADER_ADDRESS": f"smoke-{group}.smoke.{ns}",
            "LWS_GROUP_SIZE": "3",
            "LWS_WORKER_INDEX": worker,
        }
    leaders = [p for p in pods if p["metadata"]["labels"][f"{LWS}worker-index"] == "0"]
    assert [controller_of(p) for p in leaders] == [("StatefulSet", "smoke")] * 2


# ---------------------------------------------------------------------------- RayCluster

RAYCLUSTER_SMOKE = """\
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: smoke
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.46.0
  workerGroupSpecs:
  - groupName: hosts
    replicas: 2
    minReplicas: 0
    maxReplicas: 2
    numOfHosts: 2
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.46.0
"""


def test_raycluster_creates_a_head_pod_and_numofhosts_worker_pods_per_replica(
    control_plane: ControlPlane, ns: str
) -> None:
    assert apply(control_plane, ns, RAYCLUSTER_SMOKE) == "raycluster.ray.io/smoke created"

    (head,) = items(control_plane, ns, "pods", "ray.io/cluster=smoke,ray.io/node-type=head", 1)
    assert controller_of(head) == ("RayCluster", "smoke")
    assert head["metadata"]["labels"]["ray.io/group"] == "headgroup"

    # replicas x numOfHosts Pods, created directly by the RayCluster controller
    workers = items(control_plane, ns, "pods", "ray.io/cluster=smoke,ray.io/node-type=worker", 4)
    for pod in workers:
        labels = pod["metadata"]["labels"]
        assert controller_of(pod) == ("RayCluster", "smoke")
        assert pod["metadata"]["name"].startswith("smoke-hosts-worker-")
        assert labels["ray.io/group"] == "hosts"
        # KubeRay 1.5 labels replica and host indices only with its alpha feature gate
        # RayMultiHostIndexing (default off); without it the replicas are not told apart.
        assert "ray.io/worker-group-replica-index" not in labels
        assert "ray.io/replica-host-index" not in labels
        assert pod["status"]["phase"] == "Pending"

    service = get(control_plane, ns, "service", "smoke-head-svc")
    assert controller_of(service) == ("RayCluster", "smoke")


# ------------------------------------------------------------------- TPU env from LWS
# Evidence for issue 11/12: what LWS's Pod webhook writes on TPU Pods when nobody else
# (tpu-webhook, GKE) has set TPU_WORKER_ID or TPU_WORKER_HOSTNAMES.

TPU_SELECTOR = """\
        nodeSelector:
          cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice
          cloud.google.com/gke-tpu-topology: 4x4
"""
TPU_CONTAINER = """\
        containers:
        - name: main
          image: busybox
          resources:
            requests: {google.com/tpu: 4}
            limits: {google.com/tpu: 4}
"""

LWS_TPU = f"""\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: tpu
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 4
    workerTemplate:
      spec:
{TPU_SELECTOR}{TPU_CONTAINER}"""

LWS_TPU_CHIPLESS_LEADER = f"""\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: pathways
spec:
  replicas: 1
  leaderWorkerTemplate:
    size: 5
    leaderTemplate:
      spec:
{TPU_SELECTOR}        containers:
        - name: leader
          image: busybox
    workerTemplate:
      spec:
{TPU_SELECTOR}{TPU_CONTAINER}"""

TPU_VARIABLES = ("TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID", "TPU_NAME", "TPU_PROCESS_ADDRESSES")


def test_lws_injects_tpu_worker_variables_on_each_group_with_all_hosts_requesting_chips(
    control_plane: ControlPlane, ns: str
) -> None:
    apply(control_plane, ns, LWS_TPU)
    pods = items(control_plane, ns, "pods", f"{LWS}name=tpu", 8)
    env = {p["metadata"]["name"]: env_of(p) for p in pods}
    evidence = json.dumps(env, indent=1, sort_keys=True)  # shown when an assertion fails
    for group in (0, 1):
        leader = f"tpu-{group}"
        hosts = [f"{leader}.tpu"] + [f"{leader}-{i}.tpu" for i in (1, 2, 3)]
        for worker_id, pod in enumerate([leader] + [f"{leader}-{i}" for i in (1, 2, 3)]):
            assert env[pod] == {
                "TPU_WORKER_HOSTNAMES": ",".join(hosts),
                "TPU_WORKER_ID": str(worker_id),
                "TPU_NAME": leader,
                "TPU_PROCESS_ADDRESSES": ",".join(f"{h}:8476" for h in hosts),
                "TPU_PROCESS_PORT": "8476",
                "LWS_LEADER_ADDRESS": f"{leader}.tpu.{ns}",
                "LWS_GROUP_SIZE": "4",
                "LWS_WORKER_INDEX": str(worker_id),
            }, evidence
    # the StatefulSets' templates carry none of them: only the Pods do
    for sts in items(control_plane, ns, "statefulsets", f"{LWS}name=tpu", 3):
        template_env = env_of(sts["spec"]["template"])
        assert not set(TPU_VARIABLES) & set(template_env), sts["metadata"]["name"]


def test_lws_tpu_worker_variables_leave_out_a_leader_without_chips(
    control_plane: ControlPlane, ns: str
) -> None:
    apply(control_plane, ns, LWS_TPU_CHIPLESS_LEADER)
    pods = items(control_plane, ns, "pods", f"{LWS}name=pathways", 5)
    env = {p["metadata"]["name"]: env_of(p) for p in pods}
    evidence = json.dumps(env, indent=1, sort_keys=True)
    # the leader requests no chips: no TPU variables, only LWS's own
    assert env["pathways-0"] == {
        "LWS_LEADER_ADDRESS": f"pathways-0.pathways.{ns}",
        "LWS_GROUP_SIZE": "5",
        "LWS_WORKER_INDEX": "0",
    }, evidence
    hosts = [f"pathways-0-{i}.pathways" for i in (1, 2, 3, 4)]
    for i in (1, 2, 3, 4):
        assert env[f"pathways-0-{i}"] == {
            "TPU_WORKER_HOSTNAMES": ",".join(hosts),
            "TPU_WORKER_ID": str(i - 1),
            "TPU_NAME": "pathways-0",
            "TPU_PROCESS_ADDRESSES": ",".join(f"{h}:8476" for h in hosts),
            "TPU_PROCESS_PORT": "8476",
            "LWS_LEADER_ADDRESS": f"pathways-0.pathways.{ns}",
            "LWS_GROUP_SIZE": "5",
            "LWS_WORKER_INDEX": str(i),
        }, evidence


LWS_TPU7X_TWO_CONTAINERS = """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: ironwood
spec:
  replicas: 1
  leaderWorkerTemplate:
    size: 2
    workerTemplate:
      spec:
        nodeSelector:
          cloud.google.com/gke-tpu-accelerator: tpu7x
          cloud.google.com/gke-tpu-topology: 2x2x2
        containers:
        - name: numa0
          image: busybox
          resources:
            requests: {google.com/tpu: 2}
            limits: {google.com/tpu: 2}
        - name: numa1
          image: busybox
          resources:
            requests: {google.com/tpu: 2}
            limits: {google.com/tpu: 2}
"""


def test_lws_v0_8_writes_tpu_variables_on_the_first_tpu_container_only(
    control_plane: ControlPlane, ns: str
) -> None:
    # LWS v0.8.0 (pkg/utils/accelerators/tpu.go) picks the first container requesting
    # chips: one hostname per Pod, and nothing on the second TPU container.
    apply(control_plane, ns, LWS_TPU7X_TWO_CONTAINERS)
    pods = items(control_plane, ns, "pods", f"{LWS}name=ironwood", 2)
    evidence = json.dumps(
        {p["metadata"]["name"]: [env_of(p, 0), env_of(p, 1)] for p in pods}, indent=1
    )
    hosts = ["ironwood-0.ironwood", "ironwood-0-1.ironwood"]
    for worker_id, pod in enumerate(pods):  # ironwood-0, ironwood-0-1
        lws_env = {
            "LWS_LEADER_ADDRESS": f"ironwood-0.ironwood.{ns}",
            "LWS_GROUP_SIZE": "2",
            "LWS_WORKER_INDEX": str(worker_id),
        }
        assert env_of(pod, 0) == {
            "TPU_WORKER_HOSTNAMES": ",".join(hosts),
            "TPU_WORKER_ID": str(worker_id),
            "TPU_NAME": "ironwood-0",
            "TPU_PROCESS_ADDRESSES": ",".join(f"{h}:8476" for h in hosts),
            "TPU_PROCESS_PORT": "8476",
            **lws_env,
        }, evidence
        assert env_of(pod, 1) == lws_env, evidence
