"""create_app(settings): the one ASGI application of the webhook.

A FastAPI app that owns its lifecycle: its lifespan starts the certificate watcher and the review
log flusher and stops them (flushing the log) at shutdown. /healthz, /readyz and /metrics are
plain FastAPI routes. The admission paths are routes to the lean `AdmissionEndpoint`, and the app
hands a request for one of them straight to its endpoint: FastAPI's middleware stack and router
(telemetry, body-limit, exception and exit-stack layers, route matching) cost more per request
than deciding a review does (bench/RESULTS.md). No API docs or OpenAPI schema: this port faces the
API server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from webhook.admission.dispatch import Cluster, Endpoint, Policy
from webhook.admission.responses import Mode
from webhook.catalog import load_catalog
from webhook.catalog.tpu import TPU_RESOURCE
from webhook.policy.cluster import view_for
from webhook.policy.decide import Options
from webhook.policy.exemptions import Exemptions
from webhook.policy.offered import Declared, OfferPolicy
from webhook.serving.endpoint import AdmissionEndpoint
from webhook.serving.metrics import Metrics
from webhook.serving.offload import Offload
from webhook.serving.reviewlog import ReviewLog
from webhook.serving.tls import CertificateSource, ServingTLS
from webhook.settings import Settings

# path -> (endpoint, mode)
ADMISSION_ROUTES: dict[str, tuple[Endpoint, Mode]] = {
    "/mutate": ("mutate", "enforce"),
    "/mutate/warn": ("mutate", "warn"),
    "/validate": ("validate", "enforce"),
    "/validate/warn": ("validate", "warn"),
}
LOG_FLUSH_SECONDS = 0.25


@dataclass(frozen=True)
class Webhook:
    """What the app serves with, built once: tests and the benchmark reach it as `app.state`."""

    settings: Settings
    policy: Policy
    tls: ServingTLS | None
    metrics: Metrics
    review_log: ReviewLog
    offload: Offload
    source: CertificateSource | None = None  # None: the certificate files are watched
    # more tasks the app runs for its lifetime (the cluster watcher): added before it starts
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        problem = self.source.problem() if self.source is not None else ""
        problem = problem or (self.tls.problem() if self.tls is not None else "")
        body: dict[str, Any] = {
            "status": "not ready" if problem else "ok",
            "certificate": not problem,
            "catalog": len(self.policy.catalog.accelerators),
        }
        if problem:
            body["reason"] = problem
        return not problem, body


class WebhookApp(FastAPI):
    """FastAPI, with the admission routes answered by their endpoint directly."""

    def __init__(self, admission: dict[str, AdmissionEndpoint], **kwargs: Any) -> None:
        routes: list[BaseRoute] = [
            Route(path, endpoint, include_in_schema=False) for path, endpoint in admission.items()
        ]
        super().__init__(routes=routes, **kwargs)
        self.admission = admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            endpoint = self.admission.get(scope["path"])
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def create_app(
    settings: Settings, tls: ServingTLS | None = None, source: CertificateSource | None = None
) -> WebhookApp:
    """Everything built once: catalog, derived tables, metrics. Raises CatalogError.

    `source` keeps `tls` current instead of the file watcher (the selfManaged mode)."""
    catalog = load_catalog(settings.catalog)
    copy = (TPU_RESOURCE, "cpu", "memory") if settings.copy_cpu_memory_limits else (TPU_RESOURCE,)
    options = Options(
        copy_resources=copy,
        inject_worker_env=settings.inject_worker_env,
        inject_megascale=settings.inject_megascale,
        exemptions=Exemptions(
            opt_out_label=settings.honour_opt_out_label,
            skip_annotation=settings.honour_skip_annotation,
        ),
        profile=settings.profile,
    )
    webhook = Webhook(
        settings=settings,
        policy=Policy(
            catalog,
            options,
            settings.exemption_namespaces or None,
            Cluster(view_for(catalog, (), (), offer_policy(settings))),
        ),
        tls=tls,
        metrics=Metrics(),
        review_log=ReviewLog(enabled=settings.log_level in ("debug", "info")),
        offload=Offload(),
        source=source,
    )
    if tls is not None and tls.not_after is not None:
        webhook.metrics.cert_expiry = tls.not_after.timestamp()
    admission = {
        path: _endpoint(webhook, endpoint, mode)
        for path, (endpoint, mode) in ADMISSION_ROUTES.items()
    }
    app = WebhookApp(
        admission,
        title="tpu-webhook",
        version=_version(),
        lifespan=_lifespan(webhook),
        redirect_slashes=False,  # /mutate/ is not /mutate: a 404, never a redirect
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.webhook = webhook
    _add_management_routes(app, webhook)
    return app


def _endpoint(webhook: Webhook, endpoint: Endpoint, mode: Mode) -> AdmissionEndpoint:
    return AdmissionEndpoint(
        endpoint,
        mode,
        webhook.policy,
        webhook.metrics,
        webhook.review_log,
        webhook.settings.max_body_bytes,
        webhook.offload,
    )


def _lifespan(webhook: Webhook) -> Any:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(_flush_review_log(webhook.review_log))]
        tasks += [asyncio.create_task(run()) for run in webhook.background]
        if webhook.source is not None:
            tasks.append(asyncio.create_task(webhook.source.run()))
        elif webhook.tls is not None:
            tasks.append(asyncio.create_task(_watch_certificates(webhook)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            webhook.offload.close()
            webhook.review_log.flush()

    return lifespan


def _add_management_routes(app: FastAPI, webhook: Webhook) -> None:
    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(response: Response) -> dict[str, Any]:
        ready, body = webhook.readiness()
        response.status_code = 200 if ready else 503
        return body

    @app.get("/metrics")
    async def metrics() -> Response:
        if webhook.tls is not None and webhook.tls.not_after is not None:
            webhook.metrics.cert_expiry = webhook.tls.not_after.timestamp()
        data = generate_latest(webhook.metrics.registry)
        return Response(data, media_type=CONTENT_TYPE_LATEST)


async def _flush_review_log(review_log: ReviewLog) -> None:
    while True:
        await asyncio.sleep(LOG_FLUSH_SECONDS)
        review_log.flush()


async def _watch_certificates(webhook: Webhook) -> None:
    assert webhook.tls is not None
    while True:
        await asyncio.sleep(webhook.settings.cert_reload_seconds)
        if webhook.tls.reload_if_changed() and webhook.tls.not_after is not None:
            webhook.metrics.cert_expiry = webhook.tls.not_after.timestamp()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tpu-webhook")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


def offer_policy(settings: Settings) -> OfferPolicy:
    """The administrator's say on the TPU shapes the cluster offers."""
    sources = settings.offered_sources
    return OfferPolicy(
        declared=tuple(
            Declared(d.accelerator, d.topologies, d.namespaces) for d in settings.offered_shapes
        ),
        enforce=settings.enforce_offered_shapes,
        nodes="nodes" in sources,
        compute_classes="computeClasses" in sources,
        resource_flavors="resourceFlavors" in sources,
        xpk="xpk" in sources and bool(settings.xpk_configmap),
    )
