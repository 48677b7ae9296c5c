"""In-process cost per review kind, with no HTTP and no TLS (timeit, best of several repeats).

- policy: parse (msgspec envelope) + decide + build the response + serialize (orjson), the work
  the issue's "~12 µs with msgspec" figure describes;
- asgi: the whole admission handler of `create_app(Settings())` called as ASGI, with its
  metrics and its review log line (to a file, as `serve` writes it to its stderr);
- ceiling: the ceiling server's decode + fixed answer.
The difference between a server's CPU per request and `asgi` is uvicorn, httptools and TLS.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import timeit
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import ceiling
from bench.corpus import Review
from webhook.admission.dispatch import review_request
from webhook.admission.responses import build_response
from webhook.admission.review import parse_review
from webhook.serving.app import WebhookApp, create_app
from webhook.settings import Settings


@dataclass(frozen=True)
class Cost:
    review: str
    parse_us: float
    decide_us: float
    respond_us: float
    policy_us: float  # parse + decide + respond, measured together
    asgi_us: float
    ceiling_us: float


def best_us(run: Callable[[], object], repeat: int = 5, budget: float = 0.2) -> float:
    """µs per call: the best of `repeat` timings of a batch that takes about `budget` s."""
    timer = timeit.Timer(run)
    number, _ = timer.autorange()
    number = max(1, int(number * budget / 0.2))
    return min(timer.repeat(repeat, number)) / number * 1e6


def measure(reviews: list[Review], budget: float = 0.2) -> list[Cost]:
    app = create_app(Settings())
    with _review_log():
        return [_cost(app, review, budget) for review in reviews]


def _cost(app: WebhookApp, review: Review, budget: float) -> Cost:
    body, endpoint, policy = review.body, review.endpoint, app.state.webhook.policy
    api_version, request = parse_review(body)
    verdict = review_request(request, endpoint, policy)

    def policy_path() -> bytes:
        version, req = parse_review(body)
        answer = review_request(req, endpoint, policy)
        return orjson.dumps(build_response(version, req.uid, answer, "enforce"))

    def respond() -> bytes:
        return orjson.dumps(build_response(api_version, request.uid, verdict, "enforce"))

    return Cost(
        review=review.name,
        parse_us=best_us(lambda: parse_review(body), budget=budget),
        decide_us=best_us(lambda: review_request(request, endpoint, policy), budget=budget),
        respond_us=best_us(respond, budget=budget),
        policy_us=best_us(policy_path, budget=budget),
        asgi_us=_asgi_us(app, review, budget),
        ceiling_us=best_us(lambda: ceiling.answer(body), budget=budget),
    )


def _asgi_us(app: WebhookApp, review: Review, budget: float) -> float:
    """The admission handler driven as uvicorn drives it, `n` reviews per event-loop run."""
    scope = {
        "type": "http",
        "method": "POST",
        "path": review.path,
        "query_string": b"",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(review.body)).encode()),
        ],
    }
    message = {"type": "http.request", "body": review.body, "more_body": False}

    async def receive() -> dict[str, Any]:
        return message

    async def send(_: Any) -> None:
        return None

    async def many(n: int) -> None:
        for _ in range(n):
            await app(scope, receive, send)

    loop = asyncio.new_event_loop()
    try:
        return best_us(lambda: loop.run_until_complete(many(100)), budget=budget) / 100
    finally:
        loop.close()


@contextmanager
def _review_log() -> Iterator[Path]:
    """Review lines go to a scratch file, as `serve` writes them to its stderr: the review log
    writes straight to file descriptor 2, redirected for the duration."""
    with tempfile.TemporaryDirectory(prefix="bench-log-") as directory:
        path = Path(directory) / "review.log"
        sys.stderr.flush()
        stderr = os.dup(2)
        scratch = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(scratch, 2)
        try:
            yield path
        finally:
            os.dup2(stderr, 2)
            os.close(stderr)
            os.close(scratch)
