"""`tpu-webhook serve`: uvicorn over TLS, one or more worker processes, graceful shutdown."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import gc
import ipaddress
import logging
import os
import signal
import sys
from pathlib import Path

import orjson
import uvicorn

from webhook.app import create_app
from webhook.certs import CA_FILE, CERT_FILE, KEY_FILE, ensure_dev_certs
from webhook.configs import url_webhook_configurations
from webhook.protocol import WebhookHttpProtocol, WebhookLoop
from webhook.settings import Settings
from webhook.tls import ServingTLS

log = logging.getLogger("tpu_webhook.server")


class JsonFormatter(logging.Formatter):
    """One JSON object per line; review lines are already JSON and pass through."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.name == "tpu_webhook.review" and not record.exc_info:
            return message
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


def dev_configurations(settings: Settings, ca_file: Path, port: int) -> str:
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "localhost") else settings.host
    host = f"[{host}]" if ":" in host else host
    bundle = base64.b64encode(ca_file.read_bytes()).decode()
    docs = url_webhook_configurations(f"https://{host}:{port}", bundle)
    return "".join(
        "---\n" + orjson.dumps(d, option=orjson.OPT_INDENT_2).decode() + "\n" for d in docs
    )


def serve(settings: Settings) -> int:
    configure_logging(settings.log_level)
    cert, key, dev_ca = resolve_certificates(settings)
    config = uvicorn.Config(
        "webhook:unused",
        host=settings.host,
        port=settings.port,
        loop="webhook.protocol:WebhookLoop",  # a custom loop is named by its factory
        http=WebhookHttpProtocol.configured(
            settings.request_timeout_seconds, settings.shutdown_drain_seconds
        ),
        lifespan="on",
        access_log=False,
        log_config=None,
        server_header=False,
        timeout_keep_alive=settings.keep_alive_seconds,
        timeout_graceful_shutdown=settings.graceful_shutdown_seconds,
        ssl_certfile=str(cert),
        ssl_keyfile=str(key),
    )
    WebhookLoop.handshake_timeout = settings.request_timeout_seconds  # before any loop exists
    sock = config.bind_socket()
    port = sock.getsockname()[1]
    if dev_ca is not None and settings.print_webhook_configs:
        sys.stdout.write(
            f"# tpu-webhook development mode: https://127.0.0.1:{port} (CA: {dev_ca}).\n"
            "# Register it with: kubectl apply -f - <<'EOF'\n"
            + dev_configurations(settings, dev_ca, port)
            + "EOF\n"
        )
        sys.stdout.flush()
    if settings.workers == 1:
        return _run_worker(settings, config, cert, key, sock)
    return _supervise(settings, config, cert, key, sock)


def _run_worker(
    settings: Settings, config: uvicorn.Config, cert: Path, key: Path, sock: object
) -> int:
    tls = ServingTLS(cert, key, settings.client_ca_file)
    config.app = create_app(settings, tls)
    gc.collect()
    gc.freeze()  # the catalog and its tables never die: keep them out of every collection
    config.load()
    config.ssl = tls.context  # our context: TLS 1.2+, modern ciphers, reloaded in place
    server = uvicorn.Server(config)
    # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown; once that is done the
    # process has nothing left to do, so the re-raised signal ends it with status 0.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    log.info("serving on https://%s:%s", settings.host, config.port)
    server.run(sockets=[sock])  # type: ignore[list-item]
    return 0 if server.started else 1


def _supervise(
    settings: Settings, config: uvicorn.Config, cert: Path, key: Path, sock: object
) -> int:
    """Fork `workers` processes sharing the listening socket; forward SIGTERM/SIGINT to them."""
    children = []
    for _ in range(settings.workers):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            os._exit(_run_worker(settings, config, cert, key, sock))
        children.append(pid)

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = 0
    for child in children:
        _, code = os.waitpid(child, 0)
        status = status or os.waitstatus_to_exitcode(code)
    return status


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
