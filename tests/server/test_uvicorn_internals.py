"""What webhook/serving/protocol.py takes from uvicorn beyond its public API, checked against the
installed uvicorn: a uvicorn upgrade that renames or drops any of it fails here, before the
timeouts or the shutdown drain quietly stop working (tests/robustness checks their behaviour)."""

from __future__ import annotations

import asyncio
import inspect

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from webhook.serving.protocol import PRIVATE_API, WebhookHttpProtocol


async def _app(scope: object, receive: object, send: object) -> None:
    return None


def test_the_protocol_attributes_it_reads_are_set_by_uvicorn() -> None:
    config = uvicorn.Config(_app, http="httptools", lifespan="off", log_config=None)
    config.load()
    loop = asyncio.new_event_loop()
    try:
        protocol = HttpToolsProtocol(config, ServerState(), {}, _loop=loop)
        missing = [
            name
            for name in PRIVATE_API["HttpToolsProtocol attributes"]
            if not hasattr(protocol, name)
        ]
    finally:
        loop.close()
    assert missing == []


def test_the_methods_it_overrides_exist_with_the_same_parameters() -> None:
    names = (*PRIVATE_API["HttpToolsProtocol methods"], *PRIVATE_API["HttpToolsProtocol.shutdown"])
    for name in names:
        ours = inspect.signature(getattr(WebhookHttpProtocol, name))
        theirs = inspect.signature(getattr(HttpToolsProtocol, name))
        assert list(ours.parameters) == list(theirs.parameters), name


def test_the_request_cycle_has_the_flags_it_reads_and_sets() -> None:
    source = inspect.getsource(RequestResponseCycle.__init__)
    for name in PRIVATE_API["RequestResponseCycle attributes"]:
        assert f"self.{name} =" in source, name


def test_the_request_cycle_writes_through_the_protocols_transport() -> None:
    """CoalescingTransport replaces the protocol's transport after connection_made."""
    source = inspect.getsource(HttpToolsProtocol.on_headers_complete)
    for text in PRIVATE_API["on_headers_complete passes"]:
        assert text in source
    send = inspect.getsource(RequestResponseCycle.send)
    assert "self.transport.write(" in send


def test_uvicorn_still_hands_the_tls_context_to_create_server() -> None:
    """WebhookLoop adds the handshake deadline to the `ssl=` keyword of that call."""
    source = inspect.getsource(uvicorn.Server.startup)
    assert "loop.create_server(" in source
    for keyword in PRIVATE_API["Server.startup create_server keywords"]:
        assert f"{keyword}=config.{keyword}" in source
    assert "ssl_handshake_timeout" not in source, "uvicorn sets one itself now: use it"


def test_uvicorn_still_calls_shutdown_on_each_connection() -> None:
    assert "connection.shutdown()" in inspect.getsource(uvicorn.Server.shutdown)
