"""The benchmark's corpus is real: reviews the webhook parses, answered as their names say."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from bench.corpus import VERDICTS, Review, build_corpus, default_policy, load_corpus, verdict_of
from webhook.admission.dispatch import Policy
from webhook.admission.review import parse_review

CORPUS = load_corpus()
KINDS = {"tpu-job", "tpu-job-pod", "v5e-pod", "plain-pod", "tpu-pod-3-chips"}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return default_policy()


def _containers(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
    yield from spec["containers"]


def test_corpus_has_one_review_of_each_kind_the_issue_names() -> None:
    assert {r.name for r in CORPUS} == KINDS
    assert {r.verdict for r in CORPUS} == set(VERDICTS)


@pytest.mark.parametrize("review", CORPUS, ids=lambda r: r.filename)
def test_review_parses_as_an_admission_review(review: Review) -> None:
    api_version, request = parse_review(review.body)
    assert api_version == "admission.k8s.io/v1"
    assert request.operation == "CREATE"
    assert isinstance(request.object, dict)


@pytest.mark.parametrize("review", CORPUS, ids=lambda r: r.filename)
def test_review_gets_the_verdict_its_name_says(review: Review, policy: Policy) -> None:
    assert verdict_of(review, policy) == review.verdict


@pytest.mark.parametrize("review", CORPUS, ids=lambda r: r.filename)
def test_object_is_defaulted_as_the_api_server_sends_it(review: Review) -> None:
    obj = orjson.loads(review.body)["request"]["object"]
    assert obj["metadata"]["managedFields"]
    for container in _containers(obj):
        assert container["terminationMessagePath"] == "/dev/termination-log"
        assert container["imagePullPolicy"] == "IfNotPresent"
        quantities = [v for section in container["resources"].values() for v in section.values()]
        assert all(isinstance(q, str) for q in quantities)
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["dnsPolicy"] == "ClusterFirst"


def test_tpu_pod_of_the_job_is_what_the_job_controller_creates() -> None:
    review = next(r for r in CORPUS if r.name == "tpu-job-pod")
    pod = orjson.loads(review.body)["request"]["object"]
    meta = pod["metadata"]
    assert meta["ownerReferences"][0]["kind"] == "Job"
    assert meta["labels"]["batch.kubernetes.io/job-name"] == "tpu-available-chips"
    assert meta["annotations"]["batch.kubernetes.io/job-completion-index"] == "0"
    names = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    assert {"TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "JOB_COMPLETION_INDEX"} <= names
    assert 5_000 <= len(review.body) <= 7_000


def test_committed_corpus_is_what_the_generator_makes(policy: Policy) -> None:
    built = {r.filename: r.body for r in build_corpus(policy)}
    committed = {r.filename: r.body for r in CORPUS}
    assert built == committed, "regenerate with: .venv/bin/python -m bench.corpus"
