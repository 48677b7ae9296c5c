"""The benchmark corpus: AdmissionReviews as kube-apiserver sends them, built from tests/seeds.

`python -m bench.corpus` writes bench/corpus/<name>.<endpoint>.<verdict>.json (kept in git);
the file name says where the review is POSTed and what the webhook must answer. Reviews are
built the way the API server builds them (bench/apiserver.py), and the TPU Pod of the Job is
made from the Job as stored after our own mutating webhook patched it, as the Job controller
would make it, so it already carries TPU_WORKER_* and needs no patch.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import jsonpatch
import orjson
from ruamel.yaml import YAML

from bench.apiserver import Obj, admit_pod, default_job, default_pod, managed_fields
from webhook.admission.dispatch import Endpoint, Policy, review_request
from webhook.admission.review import parse_review
from webhook.catalog.tpu import JOB_COMPLETION_INDEX, JOB_NAME_LABEL, LEGACY_JOB_NAME_LABEL
from webhook.policy.decide import Verdict
from webhook.serving.app import create_app
from webhook.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "tests" / "seeds"
CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
NAMESPACE = "default"
TIME = "2026-01-15T10:00:00Z"
ADMIN = {
    "username": "kubernetes-admin",
    "groups": ["system:masters", "system:authenticated"],
    "extra": {"authentication.kubernetes.io/credential-id": ["X509SHA256=" + "5c" * 32]},
}
JOB_CONTROLLER = {
    "username": "system:serviceaccount:kube-system:job-controller",
    "uid": "0f8a6c3e-4a55-4c43-9a4e-7b2f5d1c9e01",
    "groups": [
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    ],
    "extra": {
        "authentication.kubernetes.io/credential-id": ["JTI=7d1c5e0a-2b8f-4d3e-9a61-0c4b8e2f5a17"]
    },
}
VERDICTS = ("allowed", "patched", "denied")


@dataclass(frozen=True)
class Review:
    name: str  # tpu-job
    endpoint: Endpoint
    verdict: str  # allowed | patched | denied
    body: bytes

    @property
    def path(self) -> str:
        return f"/{self.endpoint}"

    @property
    def filename(self) -> str:
        return f"{self.name}.{self.endpoint}.{self.verdict}.json"


def load_corpus(directory: Path = CORPUS_DIR) -> list[Review]:
    """The committed reviews, in file-name order."""
    reviews = []
    for file in sorted(directory.glob("*.json")):
        name, endpoint, verdict, _ = file.name.rsplit(".", 3)
        # the names build_corpus wrote: <name>.<endpoint>.<verdict>.json
        reviews.append(Review(name, cast(Endpoint, endpoint), verdict, file.read_bytes()))
    return reviews


def verdict_of(review: Review, policy: Policy) -> str:
    """allowed / patched / denied: what the in-process decision answers for this review."""
    _, request = parse_review(review.body)
    return _word(review_request(request, review.endpoint, policy))


def build_corpus(policy: Policy) -> list[Review]:
    job_manifest = _seed("v4-2x2x4-indexed-job.yaml", "Job")
    job = _job_object(job_manifest)
    job_review = _review("tpu-job", "mutate", ("batch", "v1", "Job", "jobs"), job, ADMIN, policy)
    stored_job = _apply(job, job_review, policy)
    pod_manifest = _seed("v5e-2x4-single-host-pod.yaml", "Pod")
    plain = _without_tpu(pod_manifest)
    three_chips = _with_chips(pod_manifest, "3")
    denied = _stored(_apply(_user_pod(three_chips), None, policy, "mutate"), "tpu-pod-3-chips")
    return [
        job_review,
        _review("tpu-job-pod", "mutate", _POD, _job_pod(stored_job, 0), JOB_CONTROLLER, policy),
        _review("v5e-pod", "mutate", _POD, _user_pod(pod_manifest), ADMIN, policy),
        _review("plain-pod", "mutate", _POD, _user_pod(plain), ADMIN, policy),
        _review("tpu-pod-3-chips", "validate", _POD, denied, ADMIN, policy),
    ]


def write_corpus(reviews: list[Review], directory: Path = CORPUS_DIR) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.json"):
        stale.unlink()
    for review in reviews:
        (directory / review.filename).write_bytes(review.body)


_POD = ("", "v1", "Pod", "pods")


def _word(verdict: Verdict) -> str:
    return "denied" if verdict.denials else "patched" if verdict.patch else "allowed"


def _seed(file: str, kind: str) -> Obj:
    docs = YAML(typ="safe", pure=True).load_all((SEEDS / file).read_text())
    found: Obj = next(d for d in docs if d and d.get("kind") == kind)
    found.setdefault("metadata", {})["namespace"] = NAMESPACE
    return found


def _uid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"tpu-webhook/bench/{name}"))


def _job_object(manifest: Obj) -> Obj:
    """`kubectl apply -f` of the seed: last-applied annotation, client-side-apply manager."""
    job = copy.deepcopy(manifest)
    applied = json.dumps(manifest, sort_keys=True, separators=(",", ":")) + "\n"
    annotation = "kubectl.kubernetes.io/last-applied-configuration"
    job["metadata"]["annotations"] = {annotation: applied}
    job = default_job(job)
    entry = managed_fields("kubectl-client-side-apply", "batch/v1", job, TIME)
    job["metadata"]["managedFields"] = [entry]
    return job


def _user_pod(manifest: Obj) -> Obj:
    """`kubectl create -f` of a Pod manifest."""
    return _admitted(default_pod(manifest), "kubectl-create", manifest["metadata"]["name"])


def _admitted(pod: Obj, manager: str, name: str) -> Obj:
    """The field manager records the decoded Pod, then the admission plugins add theirs."""
    entry = managed_fields(manager, "v1", pod, TIME)
    pod = admit_pod(pod, "kube-api-access-" + _uid(name)[:5])
    pod["metadata"]["managedFields"] = [entry]
    return pod


def _job_pod(job: Mapping[str, Any], index: int) -> Obj:
    """Pod `index` of an Indexed Job, as the Job controller creates it."""
    name, job_uid = job["metadata"]["name"], _uid("tpu-job")
    labels = {
        "batch.kubernetes.io/controller-uid": job_uid,
        JOB_COMPLETION_INDEX: str(index),
        JOB_NAME_LABEL: name,
        "controller-uid": job_uid,
        LEGACY_JOB_NAME_LABEL: name,
    }
    spec = copy.deepcopy(job["spec"]["template"]["spec"])
    spec["hostname"] = f"{name}-{index}"
    index_ref = {"apiVersion": "v1", "fieldPath": f"metadata.labels['{JOB_COMPLETION_INDEX}']"}
    for container in spec["containers"]:
        env = container.setdefault("env", [])
        env.append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": index_ref}})
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid}
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name}-{index}-",
            "namespace": job["metadata"]["namespace"],
            "labels": labels,
            "annotations": {JOB_COMPLETION_INDEX: str(index)},
            "ownerReferences": [owner | {"controller": True, "blockOwnerDeletion": True}],
            "finalizers": ["batch.kubernetes.io/job-tracking"],
        },
        "spec": spec,
    }
    return _admitted(default_pod(pod), "kube-controller-manager", f"pod-{index}")


def _without_tpu(manifest: Obj) -> Obj:
    pod = copy.deepcopy(manifest)
    pod["metadata"]["name"] = "batch-worker"
    del pod["spec"]["nodeSelector"]
    resources = {"cpu": "2", "memory": "4Gi"}
    pod["spec"]["containers"][0]["resources"] = {"requests": resources, "limits": resources}
    return pod


def _with_chips(manifest: Obj, chips: str) -> Obj:
    pod = copy.deepcopy(manifest)
    pod["metadata"]["name"] = "tpu-job-jax-v5-3-chips"
    resources = {"google.com/tpu": chips}
    pod["spec"]["containers"][0]["resources"] = {"requests": resources, "limits": resources}
    return pod


def _stored(pod: Obj, name: str) -> Obj:
    """What a validating webhook sees: BeforeCreate has set uid, timestamp and status."""
    pod["metadata"] |= {"uid": _uid(name), "creationTimestamp": TIME}
    pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    return pod


def _review(
    name: str,
    endpoint: Endpoint,
    gvkr: tuple[str, str, str, str],
    obj: Obj,
    user: Mapping[str, Any],
    policy: Policy,
) -> Review:
    group, version, kind, resource = gvkr
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": resource}
    manager = obj["metadata"]["managedFields"][0]["manager"]
    options: Obj = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    if manager.startswith("kubectl"):
        options |= {"fieldManager": manager, "fieldValidation": "Strict"}
    request = {
        "uid": _uid(f"review/{name}"),
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        **({"name": obj["metadata"]["name"]} if "name" in obj["metadata"] else {}),
        "namespace": NAMESPACE,
        "operation": "CREATE",
        "userInfo": dict(user),
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": options,
    }
    envelope = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}
    draft = Review(name, endpoint, "allowed", orjson.dumps(envelope))
    return Review(name, endpoint, verdict_of(draft, policy), draft.body)


def _apply(obj: Obj, review: Review | None, policy: Policy, endpoint: Endpoint = "mutate") -> Obj:
    """The object after our mutating webhook's patch (review built here when not given)."""
    if review is None:
        kind = "Job" if obj["kind"] == "Job" else "Pod"
        gvkr = ("batch", "v1", "Job", "jobs") if kind == "Job" else _POD
        review = _review("draft", endpoint, gvkr, obj, ADMIN, policy)
    _, request = parse_review(review.body)
    verdict = review_request(request, endpoint, policy)
    patched: Obj = jsonpatch.apply_patch(copy.deepcopy(obj), list(verdict.patch))
    return patched


def pod_review(manifest: Obj, policy: Policy, endpoint: Endpoint = "mutate") -> Review:
    """The review the API server sends `endpoint` for `kubectl create -f` of Pod `manifest`."""
    return _review(manifest["metadata"]["name"], endpoint, _POD, _user_pod(manifest), ADMIN, policy)


def mutate_patch(manifest: Obj, policy: Policy) -> list[Obj]:
    """The JSON Patch our mutating webhook answers for `kubectl create -f` of Pod `manifest`."""
    _, request = parse_review(pod_review(manifest, policy).body)
    return list(review_request(request, "mutate", policy).patch)


def default_policy() -> Policy:
    """The policy `tpu-webhook serve` builds with its default settings."""
    policy: Policy = create_app(Settings()).state.webhook.policy
    return policy


def main() -> None:
    reviews = build_corpus(default_policy())
    write_corpus(reviews)
    for review in reviews:
        print(f"{CORPUS_DIR.relative_to(ROOT)}/{review.filename}: {len(review.body)} bytes")


if __name__ == "__main__":
    main()
