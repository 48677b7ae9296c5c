"""The floors of `python -m bench.create` answer what tpu-webhook answers, so that the benchmark's
split (the API server's charge for any webhook, the Python serving stack, our code) compares
like with like: the same patch for the benchmark's Pod, no patch for a Pod that has its ports."""

from __future__ import annotations

import base64
import copy
import http.client
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from bench.corpus import default_policy, mutate_patch, pod_review
from bench.create import FLOOR_DONE, tpu_pod
from bench.floor import Floor
from tests.support.webhook_process import make_certs
from webhook.admission.dispatch import Policy, review_request
from webhook.admission.responses import build_response
from webhook.admission.review import parse_review

pytestmark = pytest.mark.go


@pytest.fixture(scope="module")
def policy() -> Policy:
    return default_policy()


@pytest.fixture(scope="module", params=["go", "python"])
def floor(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, policy: Policy
) -> Iterator[tuple[Floor, Path]]:
    certs = tmp_path_factory.mktemp("certs")
    make_certs(certs)
    with Floor(request.param, certs, mutate_patch(tpu_pod("bench"), policy), FLOOR_DONE) as server:
        yield server, certs


def _post(floor: tuple[Floor, Path], path: str, body: bytes) -> dict[str, Any]:
    server, certs = floor
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        answer: dict[str, Any] = json.loads(response.read())
        return answer
    finally:
        connection.close()


def _ours(body: bytes, endpoint: str, policy: Policy) -> dict[str, Any]:
    api_version, request = parse_review(body)
    return build_response(
        api_version, request.uid, review_request(request, endpoint, policy), "enforce"
    )


def _without_audit(answer: dict[str, Any]) -> dict[str, Any]:
    answer = copy.deepcopy(answer)
    answer["response"].pop("auditAnnotations", None)  # audit only: the API server logs them
    return answer


def test_the_benchmark_pod_gets_our_very_patch(floor: tuple[Floor, Path], policy: Policy) -> None:
    body = pod_review(tpu_pod("bench-0"), policy).body
    ours = _ours(body, "mutate", policy)
    assert ours["response"]["patchType"] == "JSONPatch"  # a patch to compare, not two empties
    assert _post(floor, "/mutate", body) == _without_audit(ours)


def test_a_pod_that_has_the_ports_gets_no_patch(floor: tuple[Floor, Path], policy: Policy) -> None:
    patched = jsonpatch.apply_patch(tpu_pod("bench-1"), mutate_patch(tpu_pod("x"), policy))
    body = pod_review(patched, policy).body
    uid = parse_review(body)[1].uid
    assert _post(floor, "/mutate", body) == _without_audit(_ours(body, "mutate", policy))
    assert _post(floor, "/mutate", body)["response"] == {"uid": uid, "allowed": True}


def test_validate_allows_the_benchmark_pod(floor: tuple[Floor, Path], policy: Policy) -> None:
    body = pod_review(tpu_pod("bench-2"), policy, "validate").body
    assert _post(floor, "/validate", body) == _without_audit(_ours(body, "validate", policy))


def test_the_patch_is_base64_json_patch(floor: tuple[Floor, Path], policy: Policy) -> None:
    body = pod_review(tpu_pod("bench-3"), policy).body
    patch = json.loads(base64.b64decode(_post(floor, "/mutate", body)["response"]["patch"]))
    assert patch == mutate_patch(tpu_pod("bench-3"), policy)
