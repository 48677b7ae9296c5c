"""Hostile and malformed input: a clear 400/413/404/405 or a denial naming the field.

Never a 500, a stack trace in the body, or a hang (every test has a timeout). Most cases run
through the TestClient with the production body cap (3 MiB); a few run against a real
`python -m webhook serve` over TLS with a raw socket, for what only a socket can send.
"""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
from starlette.testclient import TestClient

from tests.robustness.conftest import (
    TPU,
    UID,
    Connection,
    assert_admission_review,
    assert_clean_error_body,
    decode_patch,
    multi_host_job,
    read_reply,
    request_bytes,
    review,
    run_async,
    single_host_pod,
)
from tests.support.webhook_process import WebhookProcess, make_certs

JSON = {"content-type": "application/json"}
CAP = 3 * 1024 * 1024
CHIPS_FIELD = "spec.containers[0].resources.limits[google.com/tpu]"
pytestmark = pytest.mark.timeout(60)


def post(client: TestClient, path: str, body: bytes, headers: dict[str, str] = JSON) -> Any:
    response = client.post(path, content=body, headers=headers)
    assert response.status_code < 500, response.text[:500]
    assert_clean_error_body(response.status_code, response.content)
    return response


def body_of(obj: Any, kind: str = "Pod", group: str = "", **request: Any) -> bytes:
    return orjson.dumps(review(obj, kind, group, **request))


def assert_400(response: Any, *words: str) -> None:
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert all(word in error for word in words), error


def assert_answered(response: Any, obj: Any = None) -> dict[str, Any]:
    """200, a valid AdmissionReview, and a patch (if any) that applies to `obj`."""
    assert response.status_code == 200, response.text[:300]
    answer = assert_admission_review(response.content)
    ops = decode_patch(answer)
    if ops:
        jsonpatch.apply_patch(obj, ops)
    return answer


def nested(depth: int, open_: bytes = b"[", close: bytes = b"]") -> bytes:
    return open_ * depth + close * depth


def review_around(value: bytes) -> bytes:
    """A review whose object is `value` (raw JSON bytes)."""
    return (
        b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"'
        + UID.encode()
        + b'","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":'
        + value
        + b"}}"
    )


# ---- broken JSON ----------------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.3, 0.6, 0.99])
def test_truncated_json_is_a_400(app_client: TestClient, fraction: float) -> None:
    whole = body_of(multi_host_job())
    cut = whole[: int(len(whole) * fraction)] if fraction else b""
    assert_400(post(app_client, "/mutate", cut), "invalid AdmissionReview")


@pytest.mark.parametrize(
    "literal", [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"0x10", b"'8'", b"08"]
)
def test_non_json_number_literals_are_a_400(app_client: TestClient, literal: bytes) -> None:
    body = body_of(single_host_pod(chips="__CHIPS__")).replace(b'"__CHIPS__"', literal)
    assert_400(post(app_client, "/validate", body), "invalid AdmissionReview")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("100k-nested-arrays", nested(100_000)),
        ("100k-nested-objects", b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
        ("2k-nested-arrays", nested(2_000)),
        (
            "2k-nested-in-an-annotation",
            b'{"metadata":{"annotations":{"x":' + nested(2_000) + b"}}}",
        ),
    ],
)
def test_deep_nesting_is_a_400_not_a_500(app_client: TestClient, name: str, value: bytes) -> None:
    """msgspec raises RecursionError past ~1000 levels; the webhook must answer 400 for it."""
    started = time.monotonic()
    body = review_around(value)
    assert len(body) < CAP
    response = app_client.post("/validate", content=body, headers=JSON)
    assert time.monotonic() - started < 10
    assert_clean_error_body(response.status_code, response.content)
    assert response.status_code == 400, f"{name}: HTTP {response.status_code} {response.text}"


def test_moderate_nesting_in_an_unknown_field_is_answered(app_client: TestClient) -> None:
    body = review_around(b'{"spec":{"x":' + nested(200) + b"}}")
    assert_answered(post(app_client, "/mutate", body), {"spec": {"x": json.loads(nested(200))}})


def test_duplicate_keys_are_answered_not_failed(app_client: TestClient) -> None:
    body = body_of(single_host_pod(chips="__C__")).replace(
        b'{"google.com/tpu":"__C__"}', b'{"google.com/tpu":"3","google.com/tpu":"8"}'
    )
    body = body.replace(
        b'"kind":"AdmissionReview"', b'"kind":"AdmissionReview","kind":"AdmissionReview"'
    )
    for path in ("/mutate", "/validate"):
        response = post(app_client, path, body)
        assert response.status_code in (200, 400)
        if response.status_code == 200:
            assert_admission_review(response.content)


# ---- sizes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["annotation", "container-name", "label-key", "env-value"])
def test_huge_strings_within_the_cap_are_answered(app_client: TestClient, where: str) -> None:
    pod = single_host_pod()
    huge = "x" * (CAP - 4096)
    if where == "annotation":
        pod["metadata"]["annotations"] = {"big": huge}
    elif where == "container-name":
        pod["spec"]["containers"][0]["name"] = huge
    elif where == "label-key":
        pod["metadata"]["labels"] = {huge: "v"}
    else:
        pod["spec"]["containers"][0]["env"] = [{"name": "BIG", "value": huge}]
    for path in ("/mutate", "/validate"):
        assert_answered(post(app_client, path, body_of(pod)), pod)


def test_a_huge_string_over_the_cap_is_a_413(app_client: TestClient) -> None:
    pod = single_host_pod()
    pod["metadata"]["annotations"] = {"big": "x" * (CAP + 1)}
    response = post(app_client, "/validate", body_of(pod))
    assert response.status_code == 413
    assert response.json() == {"error": f"request body larger than {CAP} bytes"}


def test_a_body_over_the_cap_without_content_length_is_a_413(app_client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(CAP // 65536 + 2):
            yield b"[" * 65536

    response = app_client.post("/validate", content=chunks(), headers=JSON)
    assert response.status_code == 413
    assert_clean_error_body(413, response.content)


def test_an_empty_body_is_a_400(app_client: TestClient) -> None:
    assert_400(post(app_client, "/validate", b""), "truncated")


# ---- the envelope ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_value", "words"),
    [
        (None, ["no request"]),
        ([], ["got `array`", "$.request"]),
        ("review", ["got `str`", "$.request"]),
        (7, ["got `int`", "$.request"]),
    ],
)
def test_a_missing_or_mistyped_request_is_a_400(
    app_client: TestClient, request_value: Any, words: list[str]
) -> None:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
    if request_value is not None:
        body["request"] = request_value
    assert_400(post(app_client, "/validate", orjson.dumps(body)), *words)


@pytest.mark.parametrize("obj", [None, [], ["spec"], "pod", 42, True, {}])
def test_an_object_that_is_not_a_mapping_is_allowed_untouched(
    app_client: TestClient, obj: Any
) -> None:
    for path in ("/mutate", "/validate"):
        answer = assert_answered(post(app_client, path, body_of(obj)))
        assert answer["response"] == {"uid": UID, "allowed": True}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("uid", 7),
        ("uid", None),
        ("kind", "Pod"),
        ("kind", ["Pod"]),
        ("operation", 1),
        ("dryRun", "yes"),
        ("namespace", ["a"]),
        ("name", {"n": 1}),
    ],
)
def test_a_mistyped_envelope_field_is_a_400_naming_it(
    app_client: TestClient, field: str, value: Any
) -> None:
    body = review(single_host_pod())
    body["request"][field] = value
    assert_400(post(app_client, "/validate", orjson.dumps(body)), f"$.request.{field}")


# ---- wrong types in the object --------------------------------------------------------------

WRONG = [None, [], {}, "x", -1, 1.5, True]


def paths_of(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if path:
        yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths_of(item, (*path, key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from paths_of(item, (*path, position))


def replaced(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    copied = copy.deepcopy(obj)
    target = copied
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return copied


SWEPT = [
    ("Pod", "", single_host_pod(env=[{"name": "A", "value": "1"}], ports=[{"containerPort": 1}])),
    ("Job", "batch", multi_host_job()),
]


@pytest.mark.parametrize(
    ("kind", "group", "path"),
    [(kind, group, path) for kind, group, obj in SWEPT for path in paths_of(obj)],
    ids=lambda v: "/".join(map(str, v)) if isinstance(v, tuple) else v,
)
def test_a_wrong_type_at_any_level_of_the_object_is_answered(
    app_client: TestClient, kind: str, group: str, path: tuple[Any, ...]
) -> None:
    """The API server rejects most of these before admission; the webhook must never fail."""
    obj = next(o for k, _, o in SWEPT if k == kind)
    for wrong in WRONG:
        broken = replaced(obj, path, wrong)
        for endpoint in ("/mutate", "/validate"):
            assert_answered(post(app_client, endpoint, body_of(broken, kind, group)), broken)


@pytest.mark.parametrize(
    "chips", ["four", -4, "-4", 1.5, "1.5", "4k", "1e3", True, None, [], {}, "", "8 ", "0x8"]
)
def test_a_bad_chip_count_is_denied_naming_the_field(app_client: TestClient, chips: Any) -> None:
    pod = single_host_pod(chips=chips)
    answer = assert_answered(post(app_client, "/validate", body_of(pod)))
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"].startswith(f"{CHIPS_FIELD}: "), answer
    assert_answered(post(app_client, "/mutate", body_of(pod)), pod)


def test_a_node_selector_that_is_a_list_is_denied_naming_the_selector(
    app_client: TestClient,
) -> None:
    pod = single_host_pod()
    pod["spec"]["nodeSelector"] = ["cloud.google.com/gke-tpu-accelerator=tpu-v5-lite-podslice"]
    answer = assert_answered(post(app_client, "/validate", body_of(pod)))
    assert answer["response"]["status"]["message"].startswith(
        "spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: Required value"
    )
    assert_answered(post(app_client, "/mutate", body_of(pod)), pod)


@pytest.mark.parametrize(
    ("where", "value"),
    [("containers", {"main": {"image": "x"}}), ("resources", "8 chips"), ("env", {"A": "1"})],
)
def test_structural_wrong_types_are_answered(
    app_client: TestClient, where: str, value: Any
) -> None:
    pod = single_host_pod()
    if where == "containers":
        pod["spec"]["containers"] = value
    else:
        pod["spec"]["containers"][0][where] = value
    for endpoint in ("/mutate", "/validate"):
        assert_answered(post(app_client, endpoint, body_of(pod)), pod)


def test_an_integer_beyond_64_bits_in_a_copied_quantity_is_not_a_500(
    app_client: TestClient,
) -> None:
    """msgspec reads 2**70 as a Python int; orjson cannot write it back in the patch."""
    pod = single_host_pod(chips="8")
    pod["spec"]["containers"][0]["resources"] = {"requests": {TPU: "8", "cpu": 2**70}}
    body = json.dumps(review(pod)).encode()
    response = app_client.post("/mutate", content=body, headers=JSON)
    assert_clean_error_body(response.status_code, response.content)
    assert response.status_code in (200, 400), response.text


# ---- unicode ---------------------------------------------------------------------------------

ODD_TEXT = [
    "трени́ровка",
    "训练-作业",
    "\u202eevil\u202c",  # right-to-left override
    "zero\u200bwidth",
    "nul\u0000byte",
    "emoji-\U0001f680",
    "e\u0301\u0301\u0301",  # combining marks
    "\ufeffbom",
    "\uffff",
]


@pytest.mark.parametrize("text", ODD_TEXT)
def test_unexpected_unicode_in_names_keys_and_selectors_is_answered(
    app_client: TestClient, text: str
) -> None:
    pod = single_host_pod()
    pod["metadata"]["name"] = text
    pod["metadata"]["labels"] = {text: text}
    pod["spec"]["containers"][0]["name"] = text
    pod["spec"]["containers"][0]["env"] = [{"name": text, "value": text}]
    for endpoint in ("/mutate", "/validate"):
        assert_answered(post(app_client, endpoint, body_of(pod)), pod)
    pod["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] = text
    answer = assert_answered(post(app_client, "/validate", body_of(pod)))
    assert answer["response"]["allowed"] is True  # an unknown TPU type is only a warning
    assert answer["response"]["warnings"]


@pytest.mark.parametrize("escape", [rb"\ud800", rb"\udfff", rb"\udc00\ud800", rb"\ud800x"])
@pytest.mark.parametrize("where", [b"infer", b"main", b"team-a", UID.encode()])
def test_lone_surrogate_escapes_are_a_400(
    app_client: TestClient, escape: bytes, where: bytes
) -> None:
    body = body_of(single_host_pod()).replace(b'"' + where + b'"', b'"' + escape + b'"', 1)
    assert escape in body
    assert_400(post(app_client, "/validate", body), "invalid AdmissionReview")


def test_an_escaped_surrogate_pair_is_a_character(app_client: TestClient) -> None:
    body = body_of(single_host_pod()).replace(b'"infer"', rb'"\ud83d\ude80"', 1)
    assert_answered(post(app_client, "/mutate", body), json.loads(body)["request"]["object"])


@pytest.mark.parametrize("raw", [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"])
def test_invalid_utf8_is_a_400(app_client: TestClient, raw: bytes) -> None:
    body = body_of(single_host_pod()).replace(b"infer", b"in" + raw + b"fer", 1)
    assert_400(post(app_client, "/validate", body), "UTF-8")


# ---- HTTP ------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize("path", ["/mutate", "/validate", "/validate/warn"])
def test_a_wrong_method_is_a_405(app_client: TestClient, method: str, path: str) -> None:
    response = app_client.request(method, path, content=body_of(single_host_pod()), headers=JSON)
    assert response.status_code == 405
    assert response.json() == {"error": "admission reviews are sent with POST"}


@pytest.mark.parametrize("path", ["/mutatex", "/mutate/", "/validate/enforce", "/%00", "/.."])
def test_an_unknown_path_is_a_404(app_client: TestClient, path: str) -> None:
    response = app_client.post(path, content=body_of(single_host_pod()), headers=JSON)
    assert response.status_code == 404
    assert_clean_error_body(404, response.content)


# ---- over TLS, against the real server -------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookProcess]:
    directory = tmp_path_factory.mktemp("hostile-certs")
    make_certs(directory)
    with WebhookProcess(directory, ["--max-body-bytes", "65536"]) as process:
        yield process


def raw_exchange(server: WebhookProcess, data: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    """Send raw bytes over TLS; (status, body) of the answer."""

    async def go() -> tuple[int, bytes]:
        connection = await Connection.open(server.port, server.ssl_context())
        try:
            connection.writer.write(data)
            await connection.writer.drain()
            reply = await asyncio.wait_for(
                read_reply(connection.reader, time.perf_counter()), timeout
            )
            return reply.status, reply.body
        finally:
            await connection.close()

    result: tuple[int, bytes] = run_async(go())
    return result


def assert_still_serving(server: WebhookProcess) -> None:
    status, body = raw_exchange(server, request_bytes("/validate", body_of(single_host_pod())))
    assert status == 200
    assert_admission_review(body)


def test_live_truncated_json_with_a_matching_length_is_a_400(live: WebhookProcess) -> None:
    whole = body_of(multi_host_job())
    status, body = raw_exchange(live, request_bytes("/mutate", whole[: len(whole) // 2]))
    assert status == 400
    assert_clean_error_body(status, body)
    assert_still_serving(live)


def test_live_content_length_over_the_cap_is_a_413_before_any_body(live: WebhookProcess) -> None:
    head = (
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 104857600\r\n\r\n"
    )
    status, body = raw_exchange(live, head, timeout=5)
    assert status == 413
    assert json.loads(body) == {"error": "request body larger than 65536 bytes"}
    assert_still_serving(live)


def test_live_chunked_body_over_the_cap_is_a_413(live: WebhookProcess) -> None:
    head = (
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"%x\r\n" % 16384 + b"[" * 16384 + b"\r\n"
    status, body = raw_exchange(live, head + chunk * 6, timeout=5)
    assert status == 413
    assert_clean_error_body(status, body)
    assert_still_serving(live)


def test_live_deep_nesting_is_a_400(live: WebhookProcess) -> None:
    status, body = raw_exchange(live, request_bytes("/validate", review_around(nested(20_000))))
    assert_clean_error_body(status, body)
    assert status == 400, body
    assert_still_serving(live)


def test_live_garbage_and_plain_http_do_not_hurt_the_server(live: WebhookProcess) -> None:
    status, _ = raw_exchange(live, b"\x00\x01\x02 not http at all\r\n\r\n", timeout=5)
    assert status == 400
    with socket.create_connection(("127.0.0.1", live.port), timeout=5) as plain:
        plain.sendall(request_bytes("/validate", b"{}"))
        try:
            answer = plain.recv(4096)
        except ConnectionResetError:
            answer = b""
    assert b"HTTP/1.1 200" not in answer
    assert_still_serving(live)


def test_live_a_body_shorter_than_its_content_length_then_closed_is_survived(
    live: WebhookProcess,
) -> None:
    with (
        socket.create_connection(("127.0.0.1", live.port), timeout=5) as raw,
        live.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(request_bytes("/validate", b"{" * 1000)[:-500])
    assert_still_serving(live)


def test_a_review_at_the_body_cap_is_answered_within_the_api_server_timeout(
    tmp_path: Path,
) -> None:
    """A 3 MiB Pod of ~40k TPU containers: the answer (and everyone else's) within 10 s.

    The API server gives a webhook at most 30 s (default 10 s); past that the review fails and
    every other review queued behind it on this single-threaded server fails too.
    """
    make_certs(tmp_path)
    pod = single_host_pod()
    one = {"name": "c", "image": "i", "resources": {"limits": {TPU: "8"}}}
    per = len(orjson.dumps(one)) + 6
    pod["spec"]["containers"] = [dict(one, name=f"c{i}") for i in range((CAP - 4096) // per)]
    body = body_of(pod)
    assert CAP - 65536 < len(body) <= CAP
    server = WebhookProcess(tmp_path).start()
    try:

        async def go() -> tuple[float, float]:
            big = await Connection.open(server.port, server.ssl_context())
            small = await Connection.open(server.port, server.ssl_context())
            started = time.perf_counter()
            answer = asyncio.ensure_future(big.post("/mutate", body, timeout=10))
            await big.sent_and_read()  # the big one is in the server before the small one
            other = await small.post("/validate", body_of(single_host_pod()), timeout=10)
            other_seconds = time.perf_counter() - started
            assert other.status == 200
            reply = await answer
            assert reply.status == 200
            return time.perf_counter() - started, other_seconds

        try:
            big_seconds, other_seconds = run_async(go())
        except TimeoutError:
            pytest.fail("a 3 MiB review (or a small one behind it) took over 10 s to answer")
        assert big_seconds < 10
        assert other_seconds < 10
    finally:
        assert server.process is not None
        server.process.kill()
        server.process.wait(10)


def test_error_bodies_never_carry_a_traceback(app_client: TestClient) -> None:
    for body in (b"{", b"[]", review_around(nested(5000)), b'{"request": 1}', b"\xff"):
        response = app_client.post("/validate", content=body, headers=JSON)
        assert_clean_error_body(response.status_code, response.content)
