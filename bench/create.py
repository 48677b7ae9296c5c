"""`python -m bench.create`: what the webhook costs a `kubectl create`, through a real API server.

The e2e control plane (dev/controlplane.py: etcd, kube-apiserver 1.35 with the
MutatingAdmissionPolicy feature gate and admissionregistration.k8s.io/v1beta1 on, and
kube-controller-manager's Job controller) runs three ways, side by side, round by round:

- `none`: no admission of ours;
- `floor-go`: the cheapest webhook there can be (bench/floor/main.go: Go's net/http, HTTP/1.1
  over TLS, the review's uid echoed with the very patch tpu-webhook answers for the benchmark's
  Pod, none for the Job's Pods, which have it), registered by the chart's configurations like
  tpu-webhook: what the API server charges for calling any webhook;
- `floor-python`: the same answers from the ceiling of `python -m bench` (bench/ceiling.py: bare
  ASGI under uvicorn, uvloop, httptools and the webhook's TLS context): what the Python serving
  stack adds to that, so that `webhook` less `floor-python` is tpu-webhook's own code;
- `webhook`: `tpu-webhook serve` on loopback, registered by the chart's own configurations in url
  mode (`helm template`, dev/chart.py): mutate and validate, as installed;
- `webhook-no-cel`: the same with `webhook.matchConditions.enabled=false` (what the CEL filter
  costs a TPU Pod, which it always lets through);
- `webhook-ns` (plain workloads only): the same with `webhook.namespaceSelector` selecting the
  namespaces labelled `tpu-webhook.io/enabled=true`, of which the plain workloads' is not: what
  every other Pod pays where the admin names the TPU namespaces;
- `policy`: the same defaults written as a MutatingAdmissionPolicy (the TPU ports the catalog
  lists, added to TPU containers that lack them), filtered by the same CEL matchConditions.

Each round measures, per way: the latency of creating TPU Pods one after the other (p50, p99);
1,000 Pod creates from 8 clients (wall time); and a Job whose controller creates 256 Pods (from
the Job's create to the 256th Pod stored, seen on a watch). Then the same with a plain workload
(Pods and a Job that ask for no TPU, as 99% of a cluster's Pods) under `none`, `webhook`,
`webhook-no-cel` and `webhook-ns`: what tpu-webhook, installed as the chart installs it, costs every
other Pod.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.corpus import default_policy, mutate_patch
from bench.floor import Floor
from dev.chart import url_mode_configurations
from dev.controlplane import ControlPlane
from tests.support.webhook_process import WebhookProcess, make_certs
from webhook.admission.trigger import TPU_RESOURCES
from webhook.catalog import load_catalog
from webhook.registration import tpu_match_expression

WAYS = ("none", "floor-go", "floor-python", "webhook", "webhook-no-cel", "policy")
PLAIN_WAYS = ("none", "webhook", "webhook-no-cel", "webhook-ns")
FEATURES = (
    "--feature-gates=MutatingAdmissionPolicy=true",
    "--runtime-config=admissionregistration.k8s.io/v1beta1=true",
)
# kube-controller-manager's client defaults (20 QPS, burst 30) would pace the Job's Pods at 20/s
# whatever admission costs: raised, so the burst measures the API server and its admission.
CONTROLLER_QPS = ("--kube-api-qps=1000", "--kube-api-burst=1000")
NAMESPACE = "bench"
# `webhook-ns` sends only the namespaces with this label: SELECTED has it, NAMESPACE does not
ENABLED = "tpu-webhook.io/enabled"
SELECTED = "bench-tpu"
SELECT_ENABLED = "webhook.namespaceSelector.matchLabels.tpu-webhook\\.io/enabled=true"  # --set
JOB_HOSTS = 256  # tpu-v4-podslice 8x8x16: 1,024 chips, 4 per host
ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY = "cloud.google.com/gke-tpu-topology"
# The floor answers "nothing to patch" to an object that already declares the first TPU port (the
# Job's Pods), as tpu-webhook does.
FLOOR_DONE = f'"containerPort":{load_catalog().ports[0].container_port}'


@dataclass(frozen=True)
class Profile:
    rounds: int
    sequential: int  # Pods created one after the other, for latency
    burst: int  # Pods created by `clients` clients
    clients: int
    job_hosts: int


PROFILES = {
    "quick": Profile(rounds=1, sequential=100, burst=1000, clients=8, job_hosts=JOB_HOSTS),
    "default": Profile(rounds=3, sequential=200, burst=1000, clients=8, job_hosts=JOB_HOSTS),
}


@dataclass
class Figures:
    way: str
    latencies: list[list[float]] = field(default_factory=list)  # per round, seconds
    burst_seconds: list[float] = field(default_factory=list)
    job_seconds: list[float] = field(default_factory=list)
    # per round: mean ms per sequential create of each timed step (see `STEPS`)
    steps: list[dict[str, float]] = field(default_factory=list)
    # per round: CPU µs per Pod of the burst, by process (see `PROCESSES`)
    cpu: list[dict[str, float]] = field(default_factory=list)

    def p(self, pct: float) -> float:
        """The median over rounds of each round's percentile, in ms."""
        return statistics.median(_percentile(r, pct) for r in self.latencies) * 1000


# --------------------------------------------------------------------------- objects


def tpu_pod(name: str) -> dict[str, Any]:
    """A v5e 2x4 single-host Pod as a user writes it: chips as limits, no TPU ports (the webhook
    and the policy add them)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "pod"}},
        "spec": {
            "nodeSelector": {ACCELERATOR: "tpu-v5-lite-podslice", TOPOLOGY: "2x4"},
            "containers": [
                {
                    "name": "main",
                    "image": "us-docker.pkg.dev/cloud-tpu-images/inference/server:v1",
                    "resources": {"limits": {TPU_RESOURCES[0]: "8"}},
                }
            ],
        },
    }


def tpu_job(name: str, hosts: int) -> dict[str, Any]:
    """A v4 8x8x16 Indexed Job as tpu-webhook stores it (ports, subdomain, worker env already
    there), so that every way creates the very same Pods and only admission differs."""
    hostnames = ",".join(f"{name}-{i}.{name}" for i in range(hosts))
    ports = [{"name": p.name, "containerPort": p.container_port} for p in load_catalog().ports]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": hosts,
            "parallelism": hosts,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"bench": "job"}},
                "spec": {
                    "subdomain": name,
                    "restartPolicy": "Never",
                    "nodeSelector": {ACCELERATOR: "tpu-v4-podslice", TOPOLOGY: "8x8x16"},
                    "containers": [
                        {
                            "name": "main",
                            "image": "us-docker.pkg.dev/cloud-tpu-images/jax:latest",
                            "ports": ports,
                            "env": [
                                {
                                    "name": "TPU_WORKER_ID",
                                    "valueFrom": {
                                        "fieldRef": {
                                            "fieldPath": "metadata.annotations"
                                            "['batch.kubernetes.io/job-completion-index']"
                                        }
                                    },
                                },
                                {"name": "TPU_WORKER_HOSTNAMES", "value": hostnames},
                            ],
                            "resources": {
                                "requests": {TPU_RESOURCES[0]: "4"},
                                "limits": {TPU_RESOURCES[0]: "4"},
                            },
                        }
                    ],
                },
            },
        },
    }


def plain_pod(name: str) -> dict[str, Any]:
    """A Pod that asks for no TPU: what most of a cluster's Pods are."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "pod"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        },
    }


def plain_job(name: str, hosts: int) -> dict[str, Any]:
    """A Job of `hosts` Pods that ask for no TPU."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": hosts,
            "parallelism": hosts,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"bench": "job"}},
                "spec": {"restartPolicy": "Never", **plain_pod(name)["spec"]},
            },
        },
    }


@dataclass(frozen=True)
class Workload:
    """What a round creates: single Pods (sequential and burst) and a Job's Pods."""

    name: str
    pod: Callable[[str], dict[str, Any]]
    job: Callable[[str, int], dict[str, Any]]
    ways: tuple[str, ...]


WORKLOADS = (
    Workload("tpu", tpu_pod, tpu_job, WAYS),
    Workload("plain", plain_pod, plain_job, PLAIN_WAYS),
)


def tpu_container_test(c: str) -> str:
    """CEL: container `c` requests or limits a TPU resource (the trigger's names)."""
    return " || ".join(
        f"(has({c}.resources) && has({c}.resources.{which}) && '{r}' in {c}.resources.{which})"
        for r in TPU_RESOURCES
        for which in ("requests", "limits")
    )


def mutating_admission_policy() -> list[dict[str, Any]]:
    """The webhook's port defaults for Pods as a MutatingAdmissionPolicy and its binding: each
    catalog port added to TPU containers that have no port of that number."""
    mutations = []
    for port in load_catalog().ports:
        lacking = (
            f"object.spec.containers.filter(c, ({tpu_container_test('c')})"
            f" && !(has(c.ports) && c.ports.exists(p, p.containerPort == {port.container_port})))"
        )
        expression = (
            f"Object{{spec: Object.spec{{containers: {lacking}.map(c, Object.spec.containers{{"
            f"name: c.name, ports: [Object.spec.containers.ports{{name: '{port.name}', "
            f"containerPort: {port.container_port}}}]}})}}}}"
        )
        mutations.append(
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}
        )
    group = "admissionregistration.k8s.io/v1beta1"
    return [
        {
            "apiVersion": group,
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": "tpu-defaults"},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "matchConditions": [{"name": "tpu-workload", "expression": tpu_match_expression()}],
                "failurePolicy": "Fail",
                "reinvocationPolicy": "IfNeeded",
                "mutations": mutations,
            },
        },
        {
            "apiVersion": group,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": "tpu-defaults"},
            "spec": {
                "policyName": "tpu-defaults",
                "matchResources": {
                    "namespaceSelector": {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/metadata.name",
                                "operator": "NotIn",
                                "values": ["kube-system"],
                            }
                        ]
                    }
                },
            },
        },
    ]


# --------------------------------------------------------------------------- API client


class Api:
    """A keep-alive HTTPS client of the API server with the admin certificate (one per thread)."""

    def __init__(self, cp: ControlPlane) -> None:
        host, port = cp.server.removeprefix("https://").rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(cp.pki_dir / "ca.crt"))
        context.load_cert_chain(str(cp.pki_dir / "admin.crt"), str(cp.pki_dir / "admin.key"))
        self.connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=60)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        self.connection.request(method, path, data, headers)
        response = self.connection.getresponse()
        return response.status, json.loads(response.read() or b"null")

    def create(self, path: str, obj: dict[str, Any]) -> float:
        started = time.perf_counter()
        status, answer = self.call("POST", path, obj)
        seconds = time.perf_counter() - started
        if status != 201:
            raise RuntimeError(f"create {path} answered {status}: {str(answer)[:300]}")
        return seconds

    def close(self) -> None:
        self.connection.close()


PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"


def clean(api: Api) -> None:
    """No Job and no Pod left in the namespace (unscheduled Pods are deleted at once)."""
    api.call("DELETE", JOBS, {"kind": "DeleteOptions", "propagationPolicy": "Orphan"})
    while True:
        api.call("DELETE", PODS, {"kind": "DeleteOptions", "gracePeriodSeconds": 0})
        _, answer = api.call("GET", f"{PODS}?limit=1")
        _, jobs = api.call("GET", f"{JOBS}?limit=1")
        if not answer["items"] and not jobs["items"]:
            return
        time.sleep(0.2)


# --------------------------------------------------------------------------- where time goes

# (label, family, label filter): histograms whose sums, divided by the creates, say where the
# time of a create goes. The API server times each webhook call (request, network, our server,
# response) and each admission plugin; our server times its own handling of a review.
STEPS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("API server: mutate webhook call", "apiserver_admission_webhook_admission_duration_seconds",
     {"name": "mutate.tpu-webhook.io"}),
    ("API server: validate webhook call", "apiserver_admission_webhook_admission_duration_seconds",
     {"name": "validate.tpu-webhook.io"}),
    ("API server: MutatingAdmissionPolicy plugin",
     "apiserver_admission_controller_admission_duration_seconds",
     {"name": "MutatingAdmissionPolicy"}),
    ("API server: all admission (admit + validate steps)",
     "apiserver_admission_step_admission_duration_seconds", {}),
    ("tpu-webhook: handling a review (both calls)", "tpu_webhook_request_duration_seconds", {}),
)  # fmt: skip


def histogram_sums(text: str) -> dict[str, float]:
    """Per step label: the sum of the matching histograms' `_sum` samples, in seconds."""
    from prometheus_client.parser import text_string_to_metric_families

    sums = dict.fromkeys((label for label, _, _ in STEPS), 0.0)
    for family in text_string_to_metric_families(text):
        for label, name, match in STEPS:
            if family.name != name:
                continue
            for sample in family.samples:
                wanted = sample.name == name + "_sum"
                if wanted and all(sample.labels.get(k) == v for k, v in match.items()):
                    sums[label] += sample.value
    return sums


def scrape(api: Api, server: WebhookProcess) -> dict[str, float]:
    api.connection.request("GET", "/metrics")
    apiserver = api.connection.getresponse().read().decode()
    context = server.ssl_context()
    connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=context)
    try:
        connection.request("GET", "/metrics")
        ours = connection.getresponse().read().decode()
    finally:
        connection.close()
    return histogram_sums(apiserver + "\n" + ours)


PROCESSES = (
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "tpu-webhook",
    "floor-go",
    "floor-python",
)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """utime + stime of each process so far."""
    out = {}
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out[name] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return out


# --------------------------------------------------------------------------- the ways


def switch_to(cp: ControlPlane, way: str, registrations: dict[str, list[dict[str, Any]]]) -> None:
    """Remove every registration, wait until a dry-run shows none in force, then register what
    `way` needs and wait until a dry-run shows it (two ways may share object names)."""
    for docs in registrations.values():
        manifest = "\n".join(json.dumps(d) for d in docs)
        cp.kubectl("delete", "--ignore-not-found", "-f", "-", input=manifest, check=True)
    await_patching(cp, False)
    await_patching(cp, False, SELECTED)
    if way in registrations:
        manifest = "\n".join(json.dumps(d) for d in registrations[way])
        cp.kubectl("apply", "-f", "-", input=manifest, check=True)
        await_patching(cp, True, SELECTED if way == "webhook-ns" else NAMESPACE)


def await_patching(cp: ControlPlane, patched: bool, namespace: str = NAMESPACE) -> None:
    """Until a dry-run create of a TPU Pod in `namespace` comes back with (or without) the TPU
    ports."""
    canary = tpu_pod("canary")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = cp.kubectl(
            "create", "--dry-run=server", "-o", "json", "-n", namespace, "-f", "-",
            input=json.dumps(canary),
        )  # fmt: skip
        if done.returncode == 0:
            container = json.loads(done.stdout)["spec"]["containers"][0]
            if bool(container.get("ports")) == patched:
                return
        time.sleep(0.2)
    raise RuntimeError(f"admission never {'started' if patched else 'stopped'} patching")


def sequential(
    cp: ControlPlane, server: WebhookProcess, count: int, workload: Workload
) -> tuple[list[float], dict[str, float]]:
    """Latency of each create, and the mean ms per create of each step of `STEPS`."""
    api, metrics = Api(cp), Api(cp)
    try:
        for i in range(5):  # warm: connection, watch caches, the webhook's connection pool
            api.create(PODS, workload.pod(f"warm-{i}"))
        before = scrape(metrics, server)
        latencies = [api.create(PODS, workload.pod(f"seq-{i}")) for i in range(count)]
        after = scrape(metrics, server)
        return latencies, {k: (after[k] - before[k]) / count * 1000 for k in before}
    finally:
        metrics.close()
        api.close()


def burst(cp: ControlPlane, count: int, clients: int, workload: Workload) -> float:
    """Wall time for `clients` threads to create `count` Pods between them."""
    apis = [Api(cp) for _ in range(clients)]
    for api in apis:
        api.call("GET", f"{PODS}?limit=1")  # connected before the clock starts
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)

    def run(n: int) -> None:
        start.wait()
        try:
            for i in range(n, count, clients):
                apis[n].create(PODS, workload.pod(f"burst-{i}"))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    for api in apis:
        api.close()
    if errors:
        raise RuntimeError(f"burst: {errors[0]!r}")
    return seconds


def job(cp: ControlPlane, hosts: int, workload: Workload) -> float:
    """From the Job's create to its last Pod stored, as a watch on the namespace sees it."""
    api, watcher = Api(cp), Api(cp)
    try:
        _, listed = api.call("GET", f"{PODS}?limit=1")
        version = listed["metadata"]["resourceVersion"]
        path = f"{PODS}?watch=1&labelSelector=bench%3Djob&resourceVersion={version}"
        watcher.connection.request("GET", path, headers={"Accept": "application/json"})
        stream = watcher.connection.getresponse()
        name = f"train-{uuid.uuid4().hex[:6]}"
        started = time.perf_counter()
        api.create(JOBS, workload.job(name, hosts))
        seen = 0
        while seen < hosts:
            line = stream.readline()
            if not line:
                raise RuntimeError("the watch ended early")
            if json.loads(line)["type"] == "ADDED":
                seen += 1
        return time.perf_counter() - started
    finally:
        watcher.close()
        api.close()


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


# --------------------------------------------------------------------------- the run


Results = dict[str, dict[str, Figures]]  # by workload, then way


def run(
    profile: Profile,
    work: Path,
    workloads: tuple[Workload, ...] = WORKLOADS,
    bin_dir: Path | None = None,
) -> tuple[Results, str]:
    """Every workload and way, round by round; the API server's version and the load averages
    around it. `bin_dir`: the control plane's binaries (default: tests/tools' build)."""
    load_before = os.getloadavg()
    make_certs(work)
    results = {w.name: {way: Figures(way) for way in w.ways} for w in workloads}
    patch = mutate_patch(tpu_pod("floor"), default_policy())  # what tpu-webhook answers
    with (
        ControlPlane(
            bin_dir=bin_dir,
            extra_apiserver_args=FEATURES,
            extra_controller_manager_args=CONTROLLER_QPS,
        ) as cp,
        WebhookProcess(work) as server,
        Floor("go", work, patch, FLOOR_DONE) as floor_go,
        Floor("python", work, patch, FLOOR_DONE) as floor_python,
    ):
        version = cp.version
        cp.kubectl("create", "namespace", NAMESPACE, check=True)
        cp.kubectl("create", "namespace", SELECTED, check=True)
        cp.kubectl("label", "namespace", SELECTED, f"{ENABLED}=true", check=True)
        api = Api(cp)
        wait_for(
            lambda: (
                api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")[0] == 200
            ),
            "the default ServiceAccount",
        )
        registrations = {
            "floor-go": url_mode_configurations(floor_go.url, server.ca_file.read_bytes()),
            "floor-python": url_mode_configurations(floor_python.url, server.ca_file.read_bytes()),
            "webhook": url_mode_configurations(server.url, server.ca_file.read_bytes()),
            "webhook-no-cel": url_mode_configurations(
                server.url,
                server.ca_file.read_bytes(),
                extra_values=["webhook.matchConditions.enabled=false"],
            ),
            "webhook-ns": url_mode_configurations(
                server.url,
                server.ca_file.read_bytes(),
                extra_values=[SELECT_ENABLED],
            ),
            "policy": mutating_admission_policy(),
        }
        assert server.process is not None
        assert floor_go.process is not None
        assert floor_python.process is not None
        pids = {n: cp.pid(n) for n in PROCESSES[:3]} | {"tpu-webhook": server.process.pid}
        pids |= {"floor-go": floor_go.process.pid, "floor-python": floor_python.process.pid}
        for number in range(profile.rounds):
            for workload in workloads:
                for way in workload.ways:
                    print(
                        f"# round {number + 1}/{profile.rounds}: {workload.name} {way}", flush=True
                    )
                    figures = results[workload.name][way]
                    switch_to(cp, way, registrations)
                    clean(api)
                    latencies, steps = sequential(cp, server, profile.sequential, workload)
                    figures.latencies.append(latencies)
                    figures.steps.append(steps)
                    clean(api)
                    before = cpu_seconds(pids)
                    seconds = burst(cp, profile.burst, profile.clients, workload)
                    figures.burst_seconds.append(seconds)
                    after = cpu_seconds(pids)
                    figures.cpu.append(
                        {n: (after[n] - before[n]) / profile.burst * 1e6 for n in PROCESSES}
                    )
                    clean(api)
                    figures.job_seconds.append(job(cp, profile.job_hosts, workload))
                    clean(api)
        api.close()
    load_after = os.getloadavg()
    loads = " / ".join(f"{a:.1f}" for a in load_before)
    loads += "; after: " + " / ".join(f"{a:.1f}" for a in load_after)
    return results, f"{version}; load average (1/5/15 min) before: {loads}"


def report(results: Results, profile: Profile, version: str, command: str) -> str:
    lines = [
        f"kube-apiserver {version}; `{command}`; {profile.rounds} round(s), workloads and ways in "
        "turn within each; medians over rounds.",
    ]
    tpu, plain = results.get("tpu"), results.get("plain")
    if tpu is not None:
        lines += ["", "TPU Pods (a v5e 2x4 Pod; a v4 8x8x16 Indexed Job):", ""]
        lines += _ways_table(tpu, profile)
        lines += _parts(tpu)
        lines += _steps_and_cpu(tpu, profile)
    if plain is not None:
        lines += [
            "",
            "Plain Pods and a plain Job (no TPU): what every other Pod pays for tpu-webhook "
            "installed as the chart installs it (`webhook`), without its CEL filter "
            "(`webhook-no-cel`: every Pod sent), and with `webhook.namespaceSelector` naming "
            "other namespaces (`webhook-ns`):",
            "",
        ]
        lines += _ways_table(plain, profile)
        lines += _steps_and_cpu(plain, profile)
    lines += ["", "Every round, seconds (burst; Job):"]
    for name, ways in results.items():
        for way, f in ways.items():
            rounds = "; ".join(
                f"{b:.2f}, {j:.2f}" for b, j in zip(f.burst_seconds, f.job_seconds, strict=True)
            )
            lines.append(f"- {name} {way}: {rounds}")
    return "\n".join(lines)


def _ways_table(results: dict[str, Figures], profile: Profile) -> list[str]:
    none = results["none"]
    lines = [
        "| way | create p50 ms | create p99 ms | added p50 ms | "
        f"{profile.burst} Pods, {profile.clients} clients, s | overhead | "
        f"Job of {profile.job_hosts} Pods, s | overhead |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base_burst = statistics.median(none.burst_seconds)
    base_job = statistics.median(none.job_seconds)
    for way, f in results.items():
        b, j = statistics.median(f.burst_seconds), statistics.median(f.job_seconds)
        added = f.p(50) - none.p(50)
        lines.append(
            f"| {way} | {f.p(50):.2f} | {f.p(99):.2f} | "
            f"{'' if way == 'none' else f'{added:+.2f}'} | {b:.2f} | "
            f"{'' if way == 'none' else f'{(b / base_burst - 1) * 100:+.1f} %'} | {j:.2f} | "
            f"{'' if way == 'none' else f'{(j / base_job - 1) * 100:+.1f} %'} |"
        )
    return lines


def _parts(results: dict[str, Figures]) -> list[str]:
    none, go, python = results["none"], results["floor-go"], results["floor-python"]
    ours = results["webhook"]
    base_burst = statistics.median(none.burst_seconds)
    base_job = statistics.median(none.job_seconds)
    lines = [
        "",
        "tpu-webhook's added cost in three parts: what the API server charges for calling any "
        "webhook (the Go floor), what the Python serving stack adds (the Python floor), and "
        "tpu-webhook's own code:",
        "",
        "| part | added p50 ms | burst overhead | Job overhead |",
        "|---|---|---|---|",
    ]
    parts = (
        ("any webhook: floor-go - none", none, go),
        ("Python serving: floor-python - floor-go", go, python),
        ("tpu-webhook's code: webhook - floor-python", python, ours),
    )
    for part, low, high in parts:
        burst_share = statistics.median(high.burst_seconds) - statistics.median(low.burst_seconds)
        job_share = statistics.median(high.job_seconds) - statistics.median(low.job_seconds)
        lines.append(
            f"| {part} | {high.p(50) - low.p(50):+.2f} | {burst_share / base_burst * 100:+.1f} % | "
            f"{job_share / base_job * 100:+.1f} % |"
        )
    return lines


def _steps_and_cpu(results: dict[str, Figures], profile: Profile) -> list[str]:
    ways = list(results)
    lines = [
        "",
        "Where a sequential create's time goes (mean ms per create, median over rounds):",
        "",
        "| step | " + " | ".join(ways) + " |",
        "|---|" + "---|" * len(ways),
    ]
    for label, _, _ in STEPS:
        cells = [f"{statistics.median(r[label] for r in results[w].steps):.3f}" for w in ways]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"CPU per Pod of the burst of {profile.burst}, µs, by process (median over rounds):",
        "",
        "| process | " + " | ".join(ways) + " |",
        "|---|" + "---|" * len(ways),
    ]
    for name in PROCESSES:
        cells = [f"{statistics.median(r[name] for r in results[w].cpu):.0f}" for w in ways]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.create", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one round of each way")
    parser.add_argument("--out", type=Path, help="also write create.md and create.json here")
    parser.add_argument(
        "--workloads",
        default="tpu,plain",
        help="comma-separated: tpu (every way), plain (none, webhook, webhook-no-cel, webhook-ns)",
    )
    parser.add_argument(
        "--bin-dir",
        type=Path,
        help="etcd, kube-apiserver, kube-controller-manager, kubectl and helm from this folder "
        "instead of tests/tools' build (another Kubernetes version)",
    )
    args = parser.parse_args(argv)
    profile = PROFILES["quick" if args.quick else "default"]
    chosen = args.workloads.split(",")
    unknown = set(chosen) - {w.name for w in WORKLOADS}
    if unknown:
        parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    workloads = tuple(w for w in WORKLOADS if w.name in chosen)
    with tempfile.TemporaryDirectory(prefix="tpu-webhook-bench-create-") as work:
        results, version = run(profile, Path(work), workloads, args.bin_dir)
    command = "python -m bench.create" + (" --quick" if args.quick else "")
    if args.workloads != "tpu,plain":
        command += f" --workloads {args.workloads}"
    text = report(results, profile, version, command)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "create.md").write_text(text + "\n")
        raw = {name: {way: f.__dict__ for way, f in ways.items()} for name, ways in results.items()}
        (args.out / "create.json").write_text(json.dumps(raw, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
