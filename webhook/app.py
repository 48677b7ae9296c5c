"""create_app(settings): the ASGI application.

The admission routes are answered by a lean ASGI handler in front (raw body, msgspec, orjson:
no framework work per review); everything else (health, readiness, metrics, docs) is FastAPI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import orjson
from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from webhook.admission.dispatch import Policy, review_request
from webhook.admission.responses import build_response
from webhook.admission.review import Request, ReviewError, parse_review_fast
from webhook.catalog import load_catalog
from webhook.catalog.tpu import TPU_RESOURCE
from webhook.metrics import Metrics
from webhook.policy.decide import ALLOW, Options, Verdict
from webhook.reviewlog import ReviewLine, ReviewLog
from webhook.settings import Settings
from webhook.tls import ServingTLS

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger("tpu_webhook.review")

ROUTES: dict[str, tuple[str, str]] = {
    "/mutate": ("mutate", "enforce"),
    "/mutate/warn": ("mutate", "warn"),
    "/validate": ("validate", "enforce"),
    "/validate/warn": ("validate", "warn"),
}
_JSON = [(b"content-type", b"application/json")]


class HTTPProblem(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class WebhookApp:
    """ASGI: POST admission routes handled here, the rest delegated to the FastAPI app."""

    def __init__(self, settings: Settings, policy: Policy, tls: ServingTLS | None) -> None:
        self.settings = settings
        self.policy = policy
        self.tls = tls
        self.metrics = Metrics()
        self.review_log = ReviewLog(enabled=settings.log_level in ("debug", "info"))
        if tls is not None and tls.not_after is not None:
            self.metrics.cert_expiry = tls.not_after.timestamp()
        self.api = _management_api(self)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = ROUTES.get(scope.get("path", "")) if scope["type"] == "http" else None
        if route is None:
            await self.api(scope, receive, send)
            return
        if scope["method"] != "POST":
            await _respond(send, 405, _error("admission reviews are sent with POST"))
            return
        endpoint, mode = route
        if scope.get("query_string") == b"mode=warn":
            mode = "warn"
        await self._admission(scope, receive, send, endpoint, mode)

    async def _admission(
        self, scope: Scope, receive: Receive, send: Send, endpoint: str, mode: str
    ) -> None:
        started = time.perf_counter()
        self.metrics.in_flight += 1
        request: Request | None = None
        verdict: Verdict | None = None
        try:
            body = await _read_body(scope, receive, self.settings.max_body_bytes)
            api_version, request, may_be_tpu = parse_review_fast(body)
            verdict = review_request(request, endpoint, self.policy) if may_be_tpu else ALLOW
            payload = build_response(api_version, request.uid, verdict, mode)
            status, data, outcome = 200, orjson.dumps(payload), _outcome(verdict, mode)
        except HTTPProblem as problem:
            status, data, outcome = problem.status, _error(str(problem)), "invalid"
        except ReviewError as error:
            status, data, outcome = 400, _error(str(error)), "invalid"
        except Exception:
            uid = request.uid if request is not None else ""
            log.exception("internal error answering review uid=%s", uid)
            status, data, outcome = 500, _error("internal error; see the webhook log"), "error"
        finally:
            self.metrics.in_flight -= 1
        await _respond(send, status, data)
        seconds = time.perf_counter() - started
        kind = request.kind.kind if request is not None else ""
        operation = request.operation if request is not None else ""
        self.metrics.observe(endpoint, kind, operation, outcome, verdict, mode, seconds)
        if request is not None and self.review_log.enabled:
            self.review_log.write(_log_line(request, endpoint, mode, verdict, outcome, seconds))


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    content_type = b""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            content_type = value
        elif name == b"content-length" and value.isdigit() and int(value) > limit:
            raise HTTPProblem(413, f"request body larger than {limit} bytes")
    if (
        content_type != b"application/json"  # as the API server sends it
        and content_type.split(b";", 1)[0].strip().lower() != b"application/json"
    ):
        raise HTTPProblem(400, "content type must be application/json")
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):
        body: bytes = message.get(
            "body", b""
        )  # the whole review at once, as the API server sends it
        if len(body) > limit:
            raise HTTPProblem(413, f"request body larger than {limit} bytes")
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


async def _respond(send: Send, status: int, data: bytes) -> None:
    headers = [*_JSON, (b"content-length", b"%d" % len(data))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def _outcome(verdict: Verdict, mode: str) -> str:
    if verdict.denials and mode == "enforce":
        return "denied"
    if verdict.denials or verdict.warnings:
        return "warned"
    return "patched" if verdict.patch else "allowed"


def _error(message: str) -> bytes:
    return orjson.dumps({"error": message})


def _log_line(
    request: Request,
    endpoint: str,
    mode: str,
    verdict: Verdict | None,
    outcome: str,
    seconds: float,
) -> ReviewLine:
    obj = request.object if isinstance(request.object, dict) else {}
    raw_meta = obj.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    name = request.name or meta.get("name") or meta.get("generateName") or ""
    return ReviewLine(
        ts=int(time.time() * 1000) / 1000,  # round() costs five times as much
        uid=request.uid[:64],
        endpoint=endpoint,
        mode=mode,
        kind=request.kind.kind[:64],
        namespace=request.namespace[:64],
        name=name[:253] if isinstance(name, str) else "",
        operation=request.operation[:16],
        outcome=outcome,
        allowed=outcome != "denied",
        rules=verdict.codes if verdict else [],
        patch_ops=len(verdict.patch) if verdict else 0,
        dry_run=bool(request.dry_run),
        duration_ms=int(seconds * 1_000_000) / 1000,
    )


def _management_api(app: WebhookApp) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(_flush_review_log(app.review_log))]
        if app.tls:
            tasks.append(asyncio.create_task(_watch_certificates(app)))
        yield
        for task in tasks:
            task.cancel()
        app.review_log.flush()

    api = FastAPI(title="tpu-webhook", version=_version(), lifespan=lifespan)

    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/readyz")
    async def readyz(response: Response) -> dict[str, Any]:
        tls_ok = app.tls is None or app.tls.loaded
        response.status_code = 200 if tls_ok else 503
        return {
            "status": "ok" if tls_ok else "not ready",
            "certificate": tls_ok,
            "catalog": len(app.policy.catalog.accelerators),
        }

    @api.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(app.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return api


async def _flush_review_log(review_log: ReviewLog, every: float = 0.25) -> None:
    while True:
        await asyncio.sleep(every)
        review_log.flush()


async def _watch_certificates(app: WebhookApp) -> None:
    assert app.tls is not None
    while True:
        await asyncio.sleep(app.settings.cert_reload_seconds)
        if app.tls.reload_if_changed() and app.tls.not_after is not None:
            app.metrics.cert_expiry = app.tls.not_after.timestamp()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tpu-webhook")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


def create_app(settings: Settings, tls: ServingTLS | None = None) -> WebhookApp:
    """Everything built once: catalog, derived tables, metrics. Raises CatalogError."""
    catalog = load_catalog(settings.catalog)
    copy = (TPU_RESOURCE, "cpu", "memory") if settings.copy_cpu_memory_limits else (TPU_RESOURCE,)
    options = Options(
        copy_resources=copy,
        inject_worker_env=settings.inject_worker_env,
        inject_megascale=settings.inject_megascale,
    )
    return WebhookApp(settings, Policy(catalog, options), tls)
