"""The ceiling: the least an admission webhook can do per review in Python on this stack.

A bare ASGI callable that reads the body, decodes the whole review with msgspec (the object as
plain dicts, as ours does), and answers a fixed one-operation patch (on /validate paths: allowed,
no patch) with a Content-Length (without one uvicorn sends the body chunked: an extra write per
response). It runs under the uvicorn
settings of `tpu-webhook serve` (webhook/server.py): uvloop, httptools, access log off, no server
header, the same keep-alive, and the webhook's own TLS context (webhook.serving.tls.ServingTLS).

    python -m bench.ceiling --port 9443 --cert tls.crt --key tls.key
"""

from __future__ import annotations

import argparse
import base64
import signal
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import msgspec
import uvicorn

from webhook.serving.tls import ServingTLS
from webhook.settings import Settings

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_PATCH = [{"op": "add", "path": "/metadata/labels/bench", "value": "ceiling"}]
PATCH = base64.b64encode(msgspec.json.encode(_PATCH)).decode()
_HEADERS = [(b"content-type", b"application/json")]
_READY = b'{"status":"ok"}'


class _Request(msgspec.Struct):
    uid: str
    object: Any = None


class _Review(msgspec.Struct):
    request: _Request


_decode = msgspec.json.Decoder(_Review).decode
_encode = msgspec.json.Encoder().encode


# `--patch` and `--done` (python -m bench.create): the patch to answer, and bytes whose presence
# in a review means there is nothing to patch
_answers: dict[str, Any] = {"patch": PATCH, "done": None}


def answer(body: bytes) -> bytes:
    """The ceiling's whole decision: decode the review, echo its uid with a fixed patch."""
    review = _decode(body)
    response: dict[str, Any] = {"uid": review.request.uid, "allowed": True}
    if _answers["done"] is None or _answers["done"] not in body:
        response["patchType"] = "JSONPatch"
        response["patch"] = _answers["patch"]
    return _encode(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    )


def allow(body: bytes) -> bytes:
    """A validating endpoint's answer: the uid, allowed, no patch."""
    response = {"uid": _decode(body).request.uid, "allowed": True}
    return _encode(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    )


async def app(scope: Message, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/readyz":
        data = _READY
    else:
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        data = allow(body) if scope["path"].startswith("/validate") else answer(body)
    headers = [*_HEADERS, (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ceiling")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    parser.add_argument("--patch", help="base64 JSON Patch to answer (default: a label)")
    parser.add_argument("--done", help="no patch for a review that contains these bytes")
    args = parser.parse_args()
    if args.patch:
        _answers["patch"] = args.patch
    if args.done:
        _answers["done"] = args.done.encode()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_config=None,
        server_header=False,
        timeout_keep_alive=Settings().keep_alive_seconds,
        ssl_certfile=str(args.cert),
        ssl_keyfile=str(args.key),
    )
    config.load()
    config.ssl = ServingTLS(args.cert, args.key).context
    for signum in (signal.SIGTERM, signal.SIGINT):  # as `tpu-webhook serve`: exit 0 after shutdown
        signal.signal(signum, lambda *_: None)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
