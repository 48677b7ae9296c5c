"""The admission endpoint: a lean ASGI callable mounted by the app at each admission path.

Raw body, msgspec and orjson: no framework work per review (no Request object, no validation
of a model, no JSON encoder of the framework). Every outcome is an HTTP answer with a JSON body:
a review (200), a malformed request (400, 405, 413) or our own bug (500); the chart's
failurePolicy decides what the API server makes of a non-200.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import orjson

from webhook.admission.dispatch import Endpoint, Policy, review_request
from webhook.admission.responses import Mode, build_response, in_mode, outcome
from webhook.admission.review import Request, ReviewError, parse_review_prefiltered
from webhook.policy.decide import Verdict
from webhook.serving.metrics import Metrics
from webhook.serving.offload import Offload
from webhook.serving.ownerqueue import OwnerEventQueue
from webhook.serving.reviewlog import ReviewLine, ReviewLog

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger("tpu_webhook.review")

_JSON = [(b"content-type", b"application/json")]


class HTTPProblem(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Decided(NamedTuple):
    status: int
    data: bytes
    result: str  # the outcome label of the metrics
    request: Request | None
    answered: Verdict | None


@dataclass(frozen=True, slots=True)
class AdmissionEndpoint:
    """POST <path>: one AdmissionReview in, one out. `?mode=warn` selects warn mode too."""

    endpoint: Endpoint
    mode: Mode
    policy: Policy
    metrics: Metrics
    review_log: ReviewLog
    max_body_bytes: int
    offload: Offload
    owner_events: OwnerEventQueue = field(default_factory=OwnerEventQueue)  # closed: none

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await _respond(send, 405, _error("admission reviews are sent with POST"))
            return
        mode: Mode = "warn" if scope.get("query_string") == b"mode=warn" else self.mode
        started = time.perf_counter()
        metrics = self.metrics
        metrics.in_flight += 1
        try:
            length = _declared_length(scope, self.max_body_bytes)
            if self.offload.inline(length):
                message = await receive()  # the whole review at once, as the API server sends
                body = _whole_body(message, self.max_body_bytes)
                if body is None:
                    body = await _read_body(receive, self.max_body_bytes, message)
                decided = self.decide(body, mode)
            else:
                async with self.offload.slots:
                    body = await _read_body(receive, self.max_body_bytes)
                    decided = await self.offload.run(partial(self.decide, body, mode))
        except HTTPProblem as problem:
            decided = Decided(problem.status, _error(str(problem)), "invalid", None, None)
        finally:
            metrics.in_flight -= 1
        await _respond(send, decided.status, decided.data)
        seconds = time.perf_counter() - started
        request, answered = decided.request, decided.answered
        kind = request.kind.kind if request is not None else ""
        operation = request.operation if request is not None else ""
        metrics.observe(self.endpoint, kind, operation, decided.result, answered, seconds)
        if request is not None and self.review_log.enabled:
            self.review_log.write(
                _log_line(request, self.endpoint, mode, answered, decided.result, seconds)
            )
        if request is not None and self.owner_events.enabled:
            self.owner_events.offer(request, self.endpoint, mode, answered)

    def decide(self, body: bytes, mode: Mode) -> Decided:
        """The answer to one review body: 200 with a review, 400, or 500 for our own bug."""
        request: Request | None = None
        try:
            api_version, request = parse_review_prefiltered(body)
            verdict = review_request(request, self.endpoint, self.policy)
            payload = build_response(api_version, request.uid, verdict, mode)
            answered = in_mode(verdict, mode) if mode == "warn" else verdict
            return Decided(200, orjson.dumps(payload), outcome(answered), request, answered)
        except ReviewError as error:
            return Decided(400, _error(str(error)), "invalid", request, None)
        except Exception:
            uid = request.uid if request is not None else ""
            log.exception("internal error answering review uid=%s", uid)
            return Decided(
                500, _error("internal error; see the webhook log"), "error", request, None
            )


def _declared_length(scope: Scope, limit: int) -> int | None:
    """The body's Content-Length (None: not given, chunked); HTTPProblem for a wrong content
    type or a body over the cap."""
    content_type = b""
    length: int | None = None
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            content_type = value
        elif name == b"content-length" and value.isdigit():
            length = int(value) if len(value) <= 16 else limit + 1
            if length > limit:
                raise HTTPProblem(413, f"request body larger than {limit} bytes")
    if (
        content_type != b"application/json"  # as the API server sends it
        and content_type.split(b";", 1)[0].strip().lower() != b"application/json"
    ):
        raise HTTPProblem(400, "content type must be application/json")
    return length


async def _read_body(receive: Receive, limit: int, message: Message | None = None) -> bytes:
    """The body of the request; `message`: its first message, already received."""
    if message is None:
        message = await receive()
    body = _whole_body(message, limit)
    if body is not None:
        return body
    chunks: list[bytes] = []
    size = 0
    while True:
        if message["type"] == "http.disconnect":
            raise HTTPProblem(400, "client disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HTTPProblem(413, f"request body larger than {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
        message = await receive()


def _whole_body(message: Message, limit: int) -> bytes | None:
    """The body when `message` holds all of it (the API server sends a review at once)."""
    if message["type"] == "http.request" and not message.get("more_body", False):
        body: bytes = message.get("body", b"")
        if len(body) > limit:
            raise HTTPProblem(413, f"request body larger than {limit} bytes")
        return body
    return None


async def _respond(send: Send, status: int, data: bytes) -> None:
    headers = [*_JSON, (b"content-length", b"%d" % len(data))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def _error(message: str) -> bytes:
    return orjson.dumps({"error": message})


def _log_line(
    request: Request,
    endpoint: Endpoint,
    mode: Mode,
    answered: Verdict | None,
    result: str,
    seconds: float,
) -> ReviewLine:
    name = request.name or _object_name(request.object)
    return ReviewLine(
        int(time.time() * 1000) / 1000,  # ts
        "review",  # msg
        request.uid[:64],
        endpoint,
        mode,
        request.kind.kind[:64],
        request.namespace[:64],
        name[:253] if isinstance(name, str) else "",
        request.operation[:16],
        result,  # outcome
        result != "denied",  # allowed
        answered.codes if answered else [],  # rules
        len(answered.patch) if answered else 0,  # patch_ops
        bool(request.dry_run),
        int(seconds * 1_000_000) / 1000,  # duration_ms
    )


def _object_name(obj: object) -> object:
    """The object's name, else its generateName (a CREATE with generateName has no name yet)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return ""
    return meta.get("name") or meta.get("generateName") or ""
