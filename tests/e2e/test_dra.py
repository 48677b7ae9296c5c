"""TPUs through Dynamic Resource Allocation on the one-node cluster, with the real scheduler.

`dra_cluster_node` (tests/support/node.py) is a control plane, containerd, a kubelet and
kube-scheduler v1.35.4, whose node is labelled as one host of a node pool GKE gives to the TPU
DRA driver (`cloud.google.com/gke-tpu-dra-driver=true`, a tpu-v6e-slice 4x4 host of 4 chips,
no `google.com/tpu`). The API server serves `resource.k8s.io/v1`; the controller manager runs
the resourceclaim controller; the scheduler's DynamicResources plugin is on by default.

There is no TPU and no TPU DRA driver here. The tests create the driver's DeviceClass and a
ResourceSlice written by hand in the driver's shape (tests/e2e/data/dra, each file with its
sources), then a multi-host Indexed Job whose Pods claim a whole host each from a
ResourceClaimTemplate, with no `google.com/tpu` and no TPU selector. tpu-webhook runs as
`tpu-webhook serve` on loopback, registered as the chart registers it in url mode.

What is real and what is not:

- the resourceclaim controller creates one ResourceClaim per Pod from the template, and the
  real scheduler allocates a claim (all 4 devices of the node's pool) and binds its Pod;
  `allocationMode: All` takes the whole node, so the Job's other 3 Pods wait, as the other
  hosts of a slice would wait for nodes of their own;
- without a kubelet plugin for `tpu.google.com`, the kubelet cannot prepare the claim: the Pod
  does not start, and the kubelet says so in an event (recorded, asserted);
- then a stand-in kubelet plugin (tests/support/draplugin: prepares the allocated devices, adds
  no device node and no environment) registers as `tpu.google.com`: the kubelet prepares each
  claim, the Pods take the host in turn, each claim is deleted when its Pod is done, and the
  Job completes. Nothing here touches a TPU; the Pods print their environment.

tpu-webhook refuses a claim template whose selector names an attribute the driver does not
publish, at the field, with the fix (`tpu.claim-invalid`). It knows a Pod for a TPU workload
through its claims only when it can read the claim template (the template's plain CEL
comparisons give the slice: v6e, 4x4, so 4 hosts). `tpu-webhook serve --cluster-objects`
lists the stored claim templates every sync period (1 s here, with the node's admin
kubeconfig; test_cluster_objects proves the chart's read-only role is enough), so the Job is
created once the server's view holds its template (a dry run shows the worker variables), and
its Pods print the worker variables the webhook wrote.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from dev.chart import url_mode_configurations, wait_until_live
from tests.support.node import DRA_NODE_LABELS, NODE_NAME, PRINTENV_IMAGE, ClusterNode
from tests.support.webhook_process import WebhookProcess, make_certs

DATA = Path(__file__).resolve().parent / "data" / "dra"
DRIVER = "tpu.google.com"
NAMESPACE = "tpu-dra"
UNCHECKED = "tpu-dra-unchecked"  # labelled tpu-webhook.io/ignore=true: never sent to us
JOB = "dra-train"
HOSTS = 4
CLAIM = "tpus"  # the Pod's name for its claim (spec.resourceClaims[0].name)
SELECTOR_FIELD = "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression"

pytestmark = [pytest.mark.e2e, pytest.mark.debian, pytest.mark.timeout(900)]


def load(name: str) -> list[dict[str, Any]]:
    return [d for d in YAML(typ="safe", pure=True).load_all((DATA / name).read_text()) if d]


def kubectl_ok(node: ClusterNode, *args: str, input: str | None = None) -> str:
    proc = node.kubectl(*args, input=input, timeout=120)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}:\n{proc.stderr}"
    return proc.stdout


def get_json(node: ClusterNode, *args: str) -> Any:
    return json.loads(kubectl_ok(node, "get", *args, "-o", "json"))


def events(node: ClusterNode, namespace: str, reason: str) -> dict[str, list[str]]:
    """The messages of the events of `reason` in `namespace`, by the object they are about."""
    found: dict[str, list[str]] = {}
    for event in get_json(node, "events", "-n", namespace)["items"]:
        if event["reason"] == reason:
            found.setdefault(event["involvedObject"]["name"], []).append(event["message"])
    return found


def create_namespace(node: ClusterNode, name: str, labels: dict[str, str] | None = None) -> None:
    metadata: dict[str, Any] = {"name": name, "labels": labels or {}}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
    kubectl_ok(node, "create", "-f", "-", input=json.dumps(namespace))
    node.wait_for(
        f"ServiceAccount {name}/default",
        lambda: node.kubectl("get", "sa", "default", "-n", name).returncode == 0,
    )


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def webhook(
    dra_cluster_node: ClusterNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    """`tpu-webhook serve` on loopback, registered with the chart's url-mode configurations."""
    node = dra_cluster_node
    certs = tmp_path_factory.mktemp("dra-webhook-certs")
    make_certs(certs)
    environment = {
        "TPU_WEBHOOK_CLUSTER_OBJECTS": "true",
        "TPU_WEBHOOK_CLUSTER_SYNC_SECONDS": "1",
        "TPU_WEBHOOK_KUBECONFIG": str(node.cp.kubeconfig),
    }
    with WebhookProcess(certs, env=environment) as server:
        configurations = url_mode_configurations(
            server.url, server.ca_file.read_bytes(), helm=node.bin_dir / "helm"
        )
        manifest = "\n".join(json.dumps(c) for c in configurations)
        kubectl_ok(node, "apply", "-f", "-", input=manifest)
        try:
            assert wait_until_live(node.cp, "default"), "the webhook configuration never went live"
            yield server
        finally:
            node.kubectl("delete", "-f", "-", input=manifest)


@pytest.fixture(scope="module")
def tpu_host(dra_cluster_node: ClusterNode) -> dict[str, Any]:
    """The driver's DeviceClass and the node's hand-written ResourceSlice, as stored."""
    node = dra_cluster_node
    for name in ("deviceclass.yaml", "resourceslice-v6e-4x4-host.yaml"):
        kubectl_ok(node, "create", "-f", str(DATA / name))
    (stored,) = get_json(node, "resourceslices")["items"]
    return dict(stored)


@dataclass
class Allocated:
    """The Job's objects once the scheduler has placed what fits, before any plugin runs."""

    seconds: float  # from `kubectl create` to the first claim allocated and its Pod bound
    pods: dict[str, dict[str, Any]]  # by name
    claims: dict[str, dict[str, Any]]  # by name
    unschedulable: dict[str, list[str]]  # FailedScheduling messages by Pod
    unprepared: dict[str, list[str]]  # FailedPrepareDynamicResources messages by Pod


@pytest.fixture(scope="module")
def allocated(
    dra_cluster_node: ClusterNode,
    webhook: WebhookProcess,
    tpu_host: dict[str, Any],
    node_figures: dict[str, str],
) -> Allocated:
    """The claim template, the Service and the 4-host Job, created in their namespace; returns
    once one claim is allocated, its Pod bound, the kubelet has said it cannot prepare it, and
    the scheduler has said why the other Pods wait."""
    node = dra_cluster_node
    create_namespace(node, NAMESPACE)
    kubectl_ok(node, "create", "-n", NAMESPACE, "-f", str(DATA / "claimtemplate-v6e-4x4-host.yaml"))
    job = str(DATA / "job-v6e-4x4.yaml")

    def template_read() -> bool:  # the server's next sync holds the template
        dry = node.kubectl("create", "--dry-run=server", "-o", "json", "-n", NAMESPACE, "-f", job)
        return dry.returncode == 0 and "TPU_WORKER_ID" in dry.stdout

    node.wait_for("the webhook's view to hold the claim template", template_read, 30)
    began = time.monotonic()
    kubectl_ok(node, "create", "-n", NAMESPACE, "-f", job)

    def placed() -> Allocated | None:
        pods = {p["metadata"]["name"]: p for p in get_json(node, "pods", "-n", NAMESPACE)["items"]}
        claims = {
            c["metadata"]["name"]: c
            for c in get_json(node, "resourceclaims", "-n", NAMESPACE)["items"]
        }
        bound = [p for p in pods.values() if p["spec"].get("nodeName")]
        allocated = [c for c in claims.values() if c.get("status", {}).get("allocation")]
        if len(pods) < HOSTS or len(claims) < HOSTS or not (bound and allocated):
            return None
        waiting = {n for n, p in pods.items() if not p["spec"].get("nodeName")}
        unschedulable = events(node, NAMESPACE, "FailedScheduling")
        unprepared = events(node, NAMESPACE, "FailedPrepareDynamicResources")
        if not waiting <= set(unschedulable) or not unprepared:
            return None
        return Allocated(time.monotonic() - began, pods, claims, unschedulable, unprepared)

    result: Allocated = node.wait_for("a claim allocated and the others waiting", placed, 120)
    node_figures["DRA Job: create -> a claim allocated, its Pod bound"] = f"{result.seconds:.1f} s"
    return result


@dataclass
class Completed:
    """The Job's Pods once the stand-in plugin let them run, and what the plugin was asked."""

    pods: list[dict[str, Any]]
    printed: dict[str, dict[str, str]]  # each Pod's printed environment, by Pod name
    prepared: list[str]  # the plugin's "prepare" lines
    claims_left: list[str]


@pytest.fixture(scope="module")
def completed(
    dra_cluster_node: ClusterNode, allocated: Allocated, node_figures: dict[str, str]
) -> Completed:
    node = dra_cluster_node
    began = time.monotonic()
    log = node.start_dra_plugin(DRIVER)
    node_figures["DRA stand-in plugin: build -> registered"] = f"{time.monotonic() - began:.1f} s"
    began = time.monotonic()
    kubectl_ok(
        node, "wait", "-n", NAMESPACE, "--for=condition=Complete", f"job/{JOB}", "--timeout=180s"
    )
    node_figures["DRA Job: plugin registered -> Complete (4 Pods in turn)"] = (
        f"{time.monotonic() - began:.1f} s"
    )
    pods = get_json(node, "pods", "-n", NAMESPACE, "-l", f"job-name={JOB}")["items"]
    printed = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        out = kubectl_ok(node, "logs", "-n", NAMESPACE, name)
        printed[name] = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    deadline = time.monotonic() + 60  # the resourceclaim controller deletes them, shortly after
    while claims_left := [
        c["metadata"]["name"] for c in get_json(node, "resourceclaims", "-n", NAMESPACE)["items"]
    ]:
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    prepared = [line for line in log.read_text().splitlines() if line.startswith("prepare ")]
    return Completed(pods, printed, prepared, claims_left)


# ------------------------------------------------------------------------- the cluster


def test_the_api_server_serves_dra_and_the_node_publishes_one_v6e_host(
    dra_cluster_node: ClusterNode, tpu_host: dict[str, Any]
) -> None:
    node = dra_cluster_node
    served = kubectl_ok(node, "api-resources", "--api-group=resource.k8s.io", "-o", "name")
    assert set(served.split()) >= {
        "deviceclasses.resource.k8s.io",
        "resourceclaims.resource.k8s.io",
        "resourceclaimtemplates.resource.k8s.io",
        "resourceslices.resource.k8s.io",
    }
    (device_class,) = get_json(node, "deviceclasses")["items"]
    assert device_class["metadata"]["name"] == DRIVER
    assert device_class["spec"]["selectors"] == [
        {"cel": {"expression": 'device.driver == "tpu.google.com"'}}
    ]
    spec = tpu_host["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == (
        DRIVER,
        NODE_NAME,
        NODE_NAME,
    )
    # the driver's attributes, read from the node's labels: the slice and the node agree
    labels = get_json(node, "node", NODE_NAME)["metadata"]["labels"]
    assert {k: labels[k] for k in DRA_NODE_LABELS} == DRA_NODE_LABELS
    devices = spec["devices"]
    assert len(devices) == int(labels["cloud.google.com/gke-accelerator-count"]) == 4
    for index, device in enumerate(devices):
        attributes = device["attributes"]
        assert set(attributes) == {
            "index", "uuid", "tpuGen", "brand", "accelerator", "chipCount", "topology"
        }  # fmt: skip
        assert attributes["index"] == {"int": index}
        assert attributes["tpuGen"] == {"string": "v6e"}
        assert attributes["accelerator"] == {
            "string": labels["cloud.google.com/gke-tpu-accelerator"]
        }
        assert attributes["topology"] == {"string": labels["cloud.google.com/gke-tpu-topology"]}
        assert attributes["chipCount"] == {"int": len(devices)}
        assert "capacity" not in device
    # GKE's TPU device plugin is off on a DRA node: nothing advertises google.com/tpu
    capacity = get_json(node, "node", NODE_NAME)["status"]["capacity"]
    assert "google.com/tpu" not in capacity


# --------------------------------------------------------------- what the scheduler does


def test_the_resourceclaim_controller_makes_one_claim_per_pod_from_the_template(
    allocated: Allocated,
) -> None:
    assert len(allocated.pods) == HOSTS
    assert len(allocated.claims) == HOSTS
    owners = set()
    for claim in allocated.claims.values():
        (owner,) = claim["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["controller"]) == ("Pod", True)
        owners.add(owner["name"])
        assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == CLAIM
        (request,) = claim["spec"]["devices"]["requests"]
        assert request["exactly"]["deviceClassName"] == DRIVER
        assert request["exactly"]["allocationMode"] == "All"
    assert owners == set(allocated.pods)
    for pod in allocated.pods.values():  # nothing else says TPU
        (main,) = pod["spec"]["containers"]
        assert main["image"] == PRINTENV_IMAGE  # the node's own image (data/dra/job-v6e-4x4.yaml)
        assert main["resources"] == {"claims": [{"name": CLAIM}]}
        assert "nodeSelector" not in pod["spec"]
        assert "affinity" not in pod["spec"]
        (status,) = pod["status"]["resourceClaimStatuses"]
        assert status["name"] == CLAIM
        assert status["resourceClaimName"] in allocated.claims


def test_the_scheduler_allocates_the_whole_host_to_one_pod_and_binds_it_to_the_node(
    allocated: Allocated,
) -> None:
    (claim,) = [c for c in allocated.claims.values() if c.get("status", {}).get("allocation")]
    allocation = claim["status"]["allocation"]
    results = allocation["devices"]["results"]
    assert sorted(r["device"] for r in results) == ["0", "1", "2", "3"]
    assert {(r["driver"], r["pool"], r["request"]) for r in results} == {
        (DRIVER, NODE_NAME, "tpus")
    }
    (term,) = allocation["nodeSelector"]["nodeSelectorTerms"]
    assert term == {
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE_NAME]}]
    }
    (reserved,) = claim["status"]["reservedFor"]
    pod = allocated.pods[reserved["name"]]
    assert reserved["resource"] == "pods"
    assert reserved["uid"] == pod["metadata"]["uid"]
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert pod["status"]["resourceClaimStatuses"] == [
        {"name": CLAIM, "resourceClaimName": claim["metadata"]["name"]}
    ]
    # only this Pod is bound: the host has no chip left for another
    assert [p for p in allocated.pods.values() if p["spec"].get("nodeName")] == [pod]


def test_the_other_hosts_pods_wait_because_the_node_has_no_chip_left(
    allocated: Allocated,
) -> None:
    waiting = {n for n, p in allocated.pods.items() if not p["spec"].get("nodeName")}
    assert len(waiting) == HOSTS - 1
    assert set(allocated.unschedulable) >= waiting
    for name in waiting:
        assert any("1 cannot allocate all claims" in m for m in allocated.unschedulable[name])
        claim = allocated.claims[allocated.pods[name]["status"]["resourceClaimStatuses"][0][
            "resourceClaimName"
        ]]  # fmt: skip
        assert "allocation" not in claim.get("status", {})


def test_without_a_kubelet_plugin_the_kubelet_cannot_prepare_the_claim(
    allocated: Allocated,
) -> None:
    """The kubelet's word on an allocated claim whose driver has no plugin on the node."""
    (bound,) = [n for n, p in allocated.pods.items() if p["spec"].get("nodeName")]
    assert set(allocated.unprepared) == {bound}
    assert any(
        "DRA driver tpu.google.com is not registered" in m for m in allocated.unprepared[bound]
    )
    assert allocated.pods[bound]["status"].get("phase") == "Pending"


def test_with_a_stand_in_plugin_each_pod_gets_the_host_in_turn_and_the_job_completes(
    completed: Completed,
) -> None:
    assert sorted(p["status"]["phase"] for p in completed.pods) == ["Succeeded"] * HOSTS
    assert {p["spec"]["nodeName"] for p in completed.pods} == {NODE_NAME}
    indexes = sorted(
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        for p in completed.pods
    )
    assert indexes == ["0", "1", "2", "3"]
    # the kubelet asked the plugin to prepare every Pod's claim: all 4 devices of the pool
    claims = {p["status"]["resourceClaimStatuses"][0]["resourceClaimName"] for p in completed.pods}
    prepared = {}
    for line in completed.prepared:
        match = re.fullmatch(rf"prepare {NAMESPACE}/(\S+): pool (\S+) devices \[(.*)\]", line)
        assert match, line
        prepared[match[1]] = (match[2], match[3].split())
    assert set(prepared) == claims
    assert all(
        (pool, sorted(devices)) == (NODE_NAME, ["0", "1", "2", "3"])
        for pool, devices in prepared.values()
    )
    for name, env in completed.printed.items():
        assert env["hostname"] == name.rsplit("-", 1)[0]  # <job>-<index>: the Job's hostname
    # a claim made from a template lives as long as its Pod runs
    assert completed.claims_left == []


# ------------------------------------------------------------- a broken claim template


def test_a_misspelt_attribute_is_found_only_by_the_scheduler_when_nobody_checks_it(
    dra_cluster_node: ClusterNode, tpu_host: dict[str, Any]
) -> None:
    """Outside tpu-webhook's reach (a namespace that opted out), the API server admits a
    selector on an attribute no TPU device has; the Pod then stays Pending with a CEL error."""
    node = dra_cluster_node
    create_namespace(node, UNCHECKED, {"tpu-webhook.io/ignore": "true"})
    kubectl_ok(
        node, "create", "-n", UNCHECKED, "-f", str(DATA / "claimtemplate-misspelt-attribute.yaml")
    )
    (template,) = load("claimtemplate-misspelt-attribute.yaml")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "misspelt"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": PRINTENV_IMAGE,
                    "imagePullPolicy": "Never",
                    "resources": {"claims": [{"name": CLAIM}]},
                }
            ],
            "resourceClaims": [
                {"name": CLAIM, "resourceClaimTemplateName": template["metadata"]["name"]}
            ],
        },
    }
    kubectl_ok(node, "create", "-n", UNCHECKED, "-f", "-", input=json.dumps(pod))
    messages = node.wait_for(
        "the scheduler's word on the misspelt selector",
        lambda: events(node, UNCHECKED, "FailedScheduling").get("misspelt"),
        timeout=60,
    )
    assert any(
        re.search(
            r'running "DynamicResources" filter plugin: claim tpu-dra-unchecked/misspelt-tpus-\w+: '
            r"selector #0: CEL runtime error: no such key: tpuGenn",
            m,
        )
        for m in messages
    ), messages
    assert not get_json(node, "pod", "misspelt", "-n", UNCHECKED)["spec"].get("nodeName")


# ------------------------------------------------------------------- what tpu-webhook does


def test_the_jobs_pods_carry_the_webhooks_worker_variables(
    dra_cluster_node: ClusterNode, completed: Completed
) -> None:
    job = get_json(dra_cluster_node, "job", JOB, "-n", NAMESPACE)
    (main,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in main.get("env", [])}
    hostnames = ",".join(f"{JOB}-{i}.{JOB}" for i in range(HOSTS))
    assert env["TPU_WORKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    assert env["TPU_WORKER_HOSTNAMES"]["value"] == hostnames
    for pod in completed.pods:
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        printed = completed.printed[pod["metadata"]["name"]]
        assert printed["TPU_WORKER_ID"] == index
        assert printed["TPU_WORKER_HOSTNAMES"] == hostnames


def test_the_webhook_refuses_a_claim_template_with_a_misspelt_attribute(
    dra_cluster_node: ClusterNode, webhook: WebhookProcess, allocated: Allocated
) -> None:
    """In the Job's namespace (`allocated` made it), where tpu-webhook is asked."""
    node = dra_cluster_node
    proc = node.kubectl(
        "create", "-n", NAMESPACE, "-f", str(DATA / "claimtemplate-misspelt-attribute.yaml")
    )
    assert proc.returncode != 0
    assert (
        f'admission webhook "validate.tpu-webhook.io" denied the request: {SELECTOR_FIELD}: '
        in proc.stderr
    ), proc.stderr
    assert "tpuGen" in proc.stderr.replace("tpuGenn", "")  # the fix: the attribute's real name
    (template,) = load("claimtemplate-misspelt-attribute.yaml")
    name = template["metadata"]["name"]
    # The mutate and validate reviews' lines may come in different batches: wait for the second.
    validated = '"endpoint":"validate","mode":"enforce","kind":"ResourceClaimTemplate",'
    logs = webhook.wait_for_log(f'{validated}"namespace":"{NAMESPACE}","name":"{name}"')
    reviews = [
        json.loads(line)
        for line in logs.splitlines()
        if line.startswith("{") and f'"name":"{name}"' in line
    ]
    denied = [r for r in reviews if r["kind"] == "ResourceClaimTemplate" and not r["allowed"]]
    assert denied, reviews
    assert {code for r in denied for code in r["rules"]} == {"tpu.claim-invalid"}
