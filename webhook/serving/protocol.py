"""The only code that reaches into uvicorn: its httptools protocol, with the two guards an
admission webhook needs and uvicorn has no setting for, and the event loop that gives the TLS
handshake a deadline.

- A deadline for each request to arrive completely (headers and body). uvicorn arms no timer
  before the first request and none while headers or a body trickle in, so a slow client could
  hold a connection forever. The API server sends a review in one go; a connection that has not
  delivered a whole request within `request_timeout` seconds is dropped.
- A drain on shutdown. uvicorn cuts idle keep-alive connections the moment SIGTERM arrives, and
  a review already on its way on one of them is lost (the API server does not retry a POST
  whose body it wrote). Here an idle connection stays open `drain_seconds` longer: a request
  that arrives gets its answer with `Connection: close`, then the connection closes.
- The TLS handshake gets the same deadline: uvicorn passes none to `loop.create_server`, and
  uvloop then waits 60 s.
- One write per response. uvicorn writes a response's head and body separately: two TLS records
  and two send calls. The connection's transport is wrapped so the writes of one loop callback
  go out as one (it pays at 8 and 64 connections, not at 1: bench/RESULTS.md).
- A cap on a request's head (request line and headers): httptools has none, and it gathers a
  header by concatenating the pieces it reads, so one endless header costs memory and quadratic
  CPU. A head over `max_head_bytes` is answered 431 and the connection closed, before the parser
  sees the bytes past the cap.
- A cap on connections. Each TLS connection costs about 38 KiB even idle. Above
  `max_connections` the connection idle longest is closed to make room (the API server's
  pooled connections are the busy ones), or, when none is idle, the new one.

Everything here that is not public uvicorn API is named in `PRIVATE_API`;
tests/server/test_uvicorn_internals.py fails when a uvicorn upgrade moves any of it.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import uvloop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

# What this module reads, calls or overrides that uvicorn does not document.
PRIVATE_API: dict[str, tuple[str, ...]] = {
    # attributes set by HttpToolsProtocol.__init__ / connection_made
    "HttpToolsProtocol attributes": ("cycle", "connections", "server_state", "loop", "transport"),
    # overridden, each calling uvicorn's own
    "HttpToolsProtocol methods": (
        "connection_made",
        "data_received",
        "on_headers_complete",
        "on_message_complete",
    ),
    # replaced for idle connections, called by uvicorn.Server on shutdown
    "HttpToolsProtocol.shutdown": ("shutdown",),
    "RequestResponseCycle attributes": ("keep_alive", "response_complete"),
    # the cycle writes through the transport the protocol holds when the request's headers end
    "on_headers_complete passes": ("transport=self.transport",),
    # uvicorn.Server.startup: loop.create_server(..., ssl=config.ssl, ...), no handshake timeout
    "Server.startup create_server keywords": ("ssl",),
}
_HEAD_END = b"\r\n\r\n"
_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
    b'content-length: %d\r\nconnection: close\r\n\r\n{"error":"request head larger than %d bytes"}'
)


class CoalescingTransport:
    """The connection's transport, with the writes of one loop callback sent as one."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:  # asked once per response: not through __getattr__
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class WebhookHttpProtocol(HttpToolsProtocol):
    request_timeout: float = 10.0
    drain_seconds: float = 2.0
    max_head_bytes: int = 32 * 1024
    max_connections: int = 1000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._started: float | None = None  # loop time the request being received began
        self._active: float = 0.0  # loop time of its last byte in or answer out
        self._draining = False
        self._head = 0  # bytes of the current request's head read so far; -1 once it ended
        self._tail = b""  # the last bytes of the head read so far (its end may span reads)

    @classmethod
    def configured(
        cls,
        request_timeout: float,
        drain_seconds: float,
        max_head_bytes: int = max_head_bytes,
        max_connections: int = max_connections,
    ) -> type[WebhookHttpProtocol]:
        attributes = {
            "request_timeout": request_timeout,
            "drain_seconds": drain_seconds,
            "max_head_bytes": max_head_bytes,
            "max_connections": max_connections,
        }
        return type("ConfiguredWebhookHttpProtocol", (cls,), attributes)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        real = cast(asyncio.Transport, transport)
        super().connection_made(real)  # flow control is built on the real transport
        # an asyncio.Transport in all but name: what uvicorn calls on it is passed through
        self.transport = cast(asyncio.Transport, CoalescingTransport(real, self.loop))
        self._started = self._active = self.loop.time()
        state = vars(self.server_state)
        if not state.get("deadline_sweeper"):
            state["deadline_sweeper"] = True  # one sweeper per server
            self.loop.call_later(1.0, self._sweep)
        if len(self.connections) > self.max_connections:
            self._make_room()

    def data_received(self, data: bytes) -> None:
        if self._started is None and self._idle():
            self._started = self.loop.time()  # a new request on a kept-alive connection
        self._active = self.loop.time()
        if self._head >= 0:  # the head is still arriving
            self._head += len(data)
            if self._head > self.max_head_bytes and not self._head_ends(data):
                self._refuse_head()
                return
            self._tail = data[-3:]
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._head = -1
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._started = None
        self._head, self._tail = 0, b""  # the next request's head
        cycle: RequestResponseCycle | None = self.cycle
        if self._draining and cycle is not None:
            cycle.keep_alive = False  # answered with Connection: close
        super().on_message_complete()

    def _head_ends(self, data: bytes) -> bool:
        """Whether the head ends within `max_head_bytes` in what has been read with `data`."""
        before = self._head - len(data) - len(self._tail)  # head bytes before `tail + data`
        end = (self._tail + data).find(_HEAD_END, 0, self.max_head_bytes - before)
        return end >= 0

    def _refuse_head(self) -> None:
        body_size = len(b'{"error":"request head larger than %d bytes"}' % self.max_head_bytes)
        self.transport.write(_TOO_LARGE % (body_size, self.max_head_bytes))
        self.transport.close()
        self._head = -1

    def _make_room(self) -> None:
        """Close the connection idle longest (no request in progress, no byte of the next one
        read: a kept-alive one, or one that never sent anything), or this new one when every
        other is busy."""
        oldest: WebhookHttpProtocol | None = None
        for connection in self.connections:
            if (
                connection is not self
                and isinstance(connection, WebhookHttpProtocol)
                and connection._head == 0
                and connection._idle()
                and not connection.transport.is_closing()
                and (oldest is None or connection._active < oldest._active)
            ):
                oldest = connection
        (oldest or self).transport.close()

    def shutdown(self) -> None:
        if not self._idle():
            super().shutdown()  # answers the request in flight with Connection: close
            return
        self._draining = True
        self.loop.call_later(self.drain_seconds, self._close_if_idle)

    def _idle(self) -> bool:
        cycle: RequestResponseCycle | None = self.cycle
        return cycle is None or cycle.response_complete

    def _sweep(self) -> None:
        """Once a second, for every connection: a timestamp check per connection, no timer per
        request (a timer armed and cancelled per request costs more than the check)."""
        deadline = self.loop.time() - self.request_timeout
        for connection in list(self.connections):
            started = getattr(connection, "_started", None)
            if started is not None and started < deadline and not connection.transport.is_closing():
                connection.transport.abort()
        if self.connections:
            self.loop.call_later(1.0, self._sweep)
        else:
            vars(self.server_state)["deadline_sweeper"] = False

    def _close_if_idle(self) -> None:
        if self._idle() and not self.transport.is_closing():
            self.transport.close()


class WebhookLoop(uvloop.Loop):
    """uvloop with a TLS handshake deadline. Named by `Config(loop="module:WebhookLoop")`, the
    public way to give uvicorn a loop factory."""

    handshake_timeout: float = 10.0

    # Why the override is ignored by mypy: asyncio's stub says create_server returns asyncio.Server;
    # uvloop's own stub (and its Cython class) returns a uvloop Server, an AbstractServer that
    # is not an asyncio.Server. The signature is uvloop's, passed through unchanged.
    async def create_server(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> asyncio.AbstractServer:
        if kwargs.get("ssl") is not None:
            kwargs.setdefault("ssl_handshake_timeout", self.handshake_timeout)
        return await super().create_server(*args, **kwargs)
