"""`tpu-webhook serve`: the app under uvicorn over TLS, one process, graceful shutdown.

One process per Pod: scale with replicas (the chart's `replicaCount`), which Kubernetes restarts
when they die, spreads over nodes and balances through the Service.
"""

from __future__ import annotations

import datetime as dt
import gc
import ipaddress
import logging
import signal
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import uvicorn

from webhook.certificates.create import CA_FILE, CERT_FILE, KEY_FILE, ensure_dev_certs
from webhook.registration import development_configurations
from webhook.serving.app import Webhook, create_app
from webhook.serving.protocol import WebhookHttpProtocol, WebhookLoop
from webhook.serving.tls import CertificateSource, ServingTLS
from webhook.settings import Settings

if TYPE_CHECKING:
    from webhook.certificates.kubeapi import KubeApi

log = logging.getLogger("tpu_webhook.server")


class JsonFormatter(logging.Formatter):
    """One JSON object per line (review lines are written by the review log, not through here)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": message,
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode()


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def resolve_certificates(settings: Settings) -> tuple[Path, Path, Path | None]:
    """(cert, key, dev CA) - the given files, or development ones made in dev_certs_dir."""
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        return settings.tls_cert_file, settings.tls_key_file, None
    directory = settings.dev_certs_dir
    ips = ["127.0.0.1", "::1"]
    names = ["localhost"]
    if settings.host not in ("0.0.0.0", "::", "127.0.0.1", "localhost"):
        (ips if _is_ip(settings.host) else names).append(settings.host)
    if ensure_dev_certs(directory, names, ips):
        log.info("made development certificates in %s", directory)
    return directory / CERT_FILE, directory / KEY_FILE, directory / CA_FILE


def serve(settings: Settings) -> int:
    configure_logging(settings.log_level)
    cert: Path | None = None
    key: Path | None = None
    dev_ca: Path | None = None
    source: CertificateSource | None = None
    if settings.cert_secret:  # selfManaged: the certificate comes from a Secret, into memory
        tls = ServingTLS(None, None, settings.client_ca_file)
        source = _self_managed(settings, tls)
    else:
        cert, key, dev_ca = resolve_certificates(settings)
        tls = ServingTLS(
            cert,
            key,
            settings.client_ca_file,
            failing_grace_seconds=settings.cert_reload_failing_seconds,
        )
    app = create_app(settings, tls, source)
    if settings.cluster_objects or settings.owner_events or settings.audit_interval_seconds:
        _read_the_cluster(settings, app.state.webhook)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="webhook.serving.protocol:WebhookLoop",  # a loop factory, named as uvicorn asks
        http=WebhookHttpProtocol.configured(
            settings.request_timeout_seconds,
            settings.shutdown_drain_seconds,
            settings.max_head_bytes,
            settings.max_connections,
        ),
        lifespan="on",
        access_log=False,
        log_config=None,
        server_header=False,
        proxy_headers=False,  # the API server calls the Pod directly: no forwarded headers to read
        timeout_keep_alive=settings.keep_alive_seconds,
        timeout_graceful_shutdown=settings.graceful_shutdown_seconds,
        # The TLS context is ours (TLS 1.2+, modern ciphers, reloaded in place): the factory
        # returns it; the files are what uvicorn's own factory would load (never called).
        ssl_certfile=None if cert is None else str(cert),
        ssl_keyfile=None if key is None else str(key),
        ssl_context_factory=_context_of(tls),
    )
    WebhookLoop.handshake_timeout = settings.request_timeout_seconds  # before any loop exists
    sock = config.bind_socket()
    port = sock.getsockname()[1]
    if dev_ca is not None and settings.print_webhook_configs:
        sys.stdout.write(development_configurations(settings.host, port, dev_ca))
        sys.stdout.flush()
    gc.collect()
    gc.freeze()  # the catalog and its tables never die: keep them out of every collection
    server = uvicorn.Server(config)
    # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown; once that is done the
    # process has nothing left to do, so the re-raised signal ends it with status 0.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    log.info("serving on https://%s:%s", settings.host, port)
    server.run(sockets=[sock])
    return 0 if server.started else 1


def _self_managed(settings: Settings, tls: ServingTLS) -> CertificateSource:
    """The selfManaged mode's source; imported here so other modes never load `kubernetes`."""
    from webhook.certificates.selfmanaged import SecretCertificates

    return SecretCertificates.from_settings(settings, tls)


def _read_the_cluster(settings: Settings, webhook: Webhook) -> None:
    """The cluster watcher, the owner-event recorder and the periodic audit, with one API
    client; imported here so other modes never load `kubernetes`."""
    from webhook.certificates.kubeapi import KubeApi

    api = KubeApi.connect(settings.kubeconfig)
    if settings.cluster_objects:
        _watch_cluster(settings, webhook, api)
    if settings.owner_events:
        from webhook.serving.ownerevents import OwnerEvents

        webhook.background.append(OwnerEvents(api, webhook.owner_events).run)
        webhook.metrics.owner_events = webhook.owner_events.counts.snapshot
    if settings.audit_interval_seconds:
        _audit_periodically(settings, webhook, api)


def _watch_cluster(settings: Settings, webhook: Webhook, api: KubeApi) -> None:
    """The cluster watcher, run by the app."""
    from webhook.serving.clusterwatch import ClusterWatch

    watch = ClusterWatch(
        api,
        webhook.policy.cluster,
        webhook.policy.catalog,
        settings.cluster_sync_seconds,
        xpk_configmap=settings.xpk_configmap,
    )
    webhook.background.append(watch.run)
    webhook.metrics.cluster_objects = watch.counts


def _audit_periodically(settings: Settings, webhook: Webhook, api: KubeApi) -> None:
    """The periodic audit (webhook/audit/periodic.py), run by the app off the request path,
    deciding with the policy and cluster view the reviews use."""
    from webhook.audit.periodic import Auditor

    auditor = Auditor(api, webhook.policy, settings.audit_interval_seconds)
    webhook.background.append(auditor.run)


def _context_of(
    tls: ServingTLS,
) -> Callable[[uvicorn.Config, Callable[[], ssl.SSLContext]], ssl.SSLContext]:
    def factory(_config: uvicorn.Config, _default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        return tls.context

    return factory


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
