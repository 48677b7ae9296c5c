"""The worst inputs found for one review, each grown to the body cap, and what each costs.

    .venv/bin/python -m bench.worst            # every shape, in process: decode, decide, answer
    .venv/bin/python -m bench.worst SHAPE...   # some of them

Each shape is a family of objects that makes some part of a review work in proportion to one
count (containers, env entries, templates, affinity terms, a value's length...): `grow` finds the
largest count whose review still fits under the cap (3 MiB), so a shape is as hostile as the API
server could ever send. tests/robustness/test_worst_case.py runs the same shapes and bounds what
each costs; the figures measured are in bench/RESULTS.md.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

import orjson

from webhook.admission.dispatch import Endpoint, Policy, review_request
from webhook.admission.responses import build_response
from webhook.admission.review import parse_review_prefiltered
from webhook.catalog import load_catalog

CAP = 3 * 1024 * 1024 - 4096  # the server's body cap, with room for the HTTP request around it
ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY = "cloud.google.com/gke-tpu-topology"
SLICE = "cloud.google.com/gke-tpu-slice-topology"
V6E_4X4 = {ACCELERATOR: "tpu-v6e-slice", TOPOLOGY: "4x4"}

Review = dict[str, Any]


def review(
    obj: dict[str, Any],
    kind: str,
    group: str = "",
    version: str = "v1",
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
) -> Review:
    request = {
        "uid": "worst-case",
        "kind": {"group": group, "version": version, "kind": kind},
        "operation": operation,
        "namespace": "team-a",
        "object": obj,
        "oldObject": old,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def container(i: int, chips: str = "4", **fields: Any) -> dict[str, Any]:
    return {
        "name": f"c{i}",
        "image": "trainer",
        "resources": {"limits": {"google.com/tpu": chips}},
        **fields,
    }


def pod(spec: dict[str, Any], **metadata: Any) -> Review:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **metadata}, "spec": spec}
    return review(obj, "Pod")


def job(template: dict[str, Any], name: str = "train") -> Review:
    spec = {
        "completionMode": "Indexed",
        "parallelism": 4,
        "completions": 4,
        "template": {"spec": template},
    }
    obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}
    return review(obj, "Job", "batch")


def jobset(replicated_jobs: list[dict[str, Any]]) -> Review:
    obj = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"replicatedJobs": replicated_jobs},
    }
    return review(obj, "JobSet", "jobset.x-k8s.io", "v1alpha2")


def replicated_job(i: int, selector: dict[str, str], env: list[Any] | None = None) -> Any:
    spec = {"nodeSelector": selector, "containers": [container(0, env=env or [])]}
    job_spec = {"parallelism": 2, "completions": 2, "template": {"spec": spec}}
    return {"name": f"r{i}", "replicas": 2, "template": {"spec": job_spec}}


def ray_cluster(groups: int) -> Review:
    head = {"template": {"spec": {"containers": [{"name": "head", "image": "ray"}]}}}
    workers = [
        {
            "groupName": f"g{i}",
            "numOfHosts": 3,
            "template": {"spec": {"nodeSelector": V6E_4X4, "containers": [container(0)]}},
        }
        for i in range(groups)
    ]
    obj = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "ray"},
        "spec": {"headGroupSpec": head, "workerGroupSpecs": workers},
    }
    return review(obj, "RayCluster", "ray.io")


def leader_worker_set(containers: int) -> Review:
    leader = {
        "spec": {
            "nodeSelector": V6E_4X4,
            "containers": [container(i, "3") for i in range(containers)],
        }
    }
    worker = {"spec": {"nodeSelector": V6E_4X4, "containers": [container(0)]}}
    obj = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "lws"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": 3, "leaderTemplate": leader, "workerTemplate": worker},
        },
    }
    return review(obj, "LeaderWorkerSet", "leaderworkerset.x-k8s.io")


def affinity(terms: int) -> dict[str, Any]:
    term = [
        {
            "matchExpressions": [
                {"key": ACCELERATOR, "operator": "In", "values": ["tpu-v6e-slice"]},
                {"key": TOPOLOGY, "operator": "In", "values": [f"{i}x4"]},
            ]
        }
        for i in range(terms)
    ]
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": term}}
    return {"nodeAffinity": required}


def update_of(containers: int) -> Review:
    listed = [container(i, "3") for i in range(containers)]
    spec: dict[str, Any] = {"nodeSelector": V6E_4X4, "containers": listed}
    new = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    old = {**new, "spec": {**spec, "containers": listed[:-1]}}
    return review(new, "Pod", operation="UPDATE", old=old)


def _hostnames(count: int) -> list[Any]:
    return [{"name": "TPU_WORKER_HOSTNAMES", "value": "a," * 20} for _ in range(count)]


# name -> the review of size n. Each grows one count; `grow` picks n.
SHAPES: dict[str, Callable[[int], Review]] = {
    "long-accelerator-jobset": lambda n: jobset(
        [replicated_job(0, {ACCELERATOR: "tpu-v6e-slicf" + "a" * n, TOPOLOGY: "4x4"})]
    ),
    "long-accelerator-pod": lambda n: pod(
        {"nodeSelector": {ACCELERATOR: "v" * n}, "containers": [container(0)]}
    ),
    "long-topology": lambda n: pod(
        {
            "nodeSelector": {ACCELERATOR: "tpu-v6e-slice", TOPOLOGY: "4x" * n + "4"},
            "containers": [container(0)],
        }
    ),
    "long-slice-annotation": lambda n: pod(
        {"nodeSelector": {ACCELERATOR: "tpu7x"}, "containers": [container(0)]},
        annotations={SLICE: "4x" * n + "4"},
    ),
    "containers-wrong-chips": lambda n: pod(
        {"nodeSelector": V6E_4X4, "containers": [container(i, "3") for i in range(n)]}
    ),
    "containers-missing-limits": lambda n: pod(
        {
            "nodeSelector": V6E_4X4,
            "containers": [
                {"name": f"c{i}", "image": "x", "resources": {"requests": {"google.com/tpu": "4"}}}
                for i in range(n)
            ],
        }
    ),
    "containers-tpu7x-split": lambda n: pod(
        {
            "nodeSelector": {ACCELERATOR: "tpu7x", TOPOLOGY: "2x2x1"},
            "containers": [container(i, "1") for i in range(n)],
        }
    ),
    "env-hostnames": lambda n: job(
        {"nodeSelector": V6E_4X4, "containers": [container(0, env=_hostnames(n))]}
    ),
    "env-one-long-hostnames": lambda n: job(
        {
            "nodeSelector": V6E_4X4,
            "containers": [container(0, env=[{"name": "TPU_WORKER_HOSTNAMES", "value": "a," * n}])],
        }
    ),
    "env-worker-ids": lambda n: job(
        {
            "nodeSelector": V6E_4X4,
            "containers": [container(0, env=[{"name": "TPU_WORKER_ID", "value": "99999999"}] * n)],
        }
    ),
    "jobset-replicated-jobs": lambda n: jobset(
        [
            replicated_job(
                i,
                V6E_4X4,
                [
                    {"name": "MEGASCALE_NUM_SLICES", "value": "3"},
                    {"name": "MEGASCALE_COORDINATOR_ADDRESS", "value": "x"},
                ],
            )
            for i in range(n)
        ]
    ),
    "ray-worker-groups": ray_cluster,
    "affinity-terms": lambda n: pod({"affinity": affinity(n), "containers": [container(0)]}),
    "ports": lambda n: pod(
        {
            "nodeSelector": V6E_4X4,
            "containers": [
                container(
                    0,
                    ports=[
                        {
                            "name": f"tpu-comm-{i + 1}" if i else "tpu-comm",
                            "containerPort": 9000 + i,
                        }
                        for i in range(n)
                    ],
                )
            ],
        }
    ),
    "owner-references": lambda n: pod(
        {"nodeSelector": V6E_4X4, "containers": [container(0)]},
        ownerReferences=[{"apiVersion": "v1", "kind": "X", "name": "y"}] * n,
    ),
    "long-chip-count": lambda n: pod(
        {"nodeSelector": V6E_4X4, "containers": [container(0, "9" * n)]}
    ),
    "long-memory": lambda n: pod(
        {
            "nodeSelector": V6E_4X4,
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "resources": {"limits": {"google.com/tpu": "4", "memory": "9" * n}},
                }
            ],
        }
    ),
    "long-name-job": lambda n: job(
        {"nodeSelector": V6E_4X4, "containers": [container(0)]}, "j" * n
    ),
    "update-containers": update_of,
    "leaderworkerset-containers": leader_worker_set,
}


def grow(shape: Callable[[int], Review], cap: int = CAP) -> tuple[bytes, int]:
    """(review body, n) for the largest n whose body fits under `cap`."""
    n = 8
    while len(orjson.dumps(shape(n * 2))) <= cap:
        n *= 2
    low, high = n, n * 2
    while high - low > 1:
        middle = (low + high) // 2
        if len(orjson.dumps(shape(middle))) <= cap:
            low = middle
        else:
            high = middle
    return orjson.dumps(shape(low)), low


@dataclass(frozen=True)
class Cost:
    shape: str
    n: int
    body_bytes: int
    endpoint: Endpoint
    decode_ms: float  # parse_review_prefiltered: the envelope and the whole object
    decide_ms: float  # review_request: the policy
    answer_ms: float  # build_response and orjson
    answer_bytes: int


def measure(name: str, body: bytes, n: int, policy: Policy, endpoint: Endpoint) -> Cost:
    """One review's cost, as the server's large-review path runs it: the collector paused."""
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        api_version, request = parse_review_prefiltered(body)
        decoded = time.perf_counter()
        verdict = review_request(request, endpoint, policy)
        decided = time.perf_counter()
        answer = orjson.dumps(build_response(api_version, request.uid, verdict, "enforce"))
        answered = time.perf_counter()
    finally:
        gc.enable()
    return Cost(
        name,
        n,
        len(body),
        endpoint,
        (decoded - started) * 1000,
        (decided - decoded) * 1000,
        (answered - decided) * 1000,
        len(answer),
    )


def main(argv: list[str]) -> int:
    policy = Policy(load_catalog())
    names = argv or list(SHAPES)
    print("| shape | n | body KiB | endpoint | decode ms | decide ms | answer ms | answer KiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        body, n = grow(SHAPES[name])
        for endpoint in get_args(Endpoint):
            best = min(
                (measure(name, body, n, policy, endpoint) for _ in range(3)),
                key=lambda c: c.decode_ms + c.decide_ms + c.answer_ms,
            )
            print(
                f"| {name} | {n} | {len(body) // 1024} | {endpoint} | {best.decode_ms:.1f} | "
                f"{best.decide_ms:.1f} | {best.answer_ms:.1f} | {best.answer_bytes / 1024:.1f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
