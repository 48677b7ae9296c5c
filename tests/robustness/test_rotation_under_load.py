"""Certificate rotation while clients send: zero failed requests, each new serial served.

The certificate directory is laid out like a Kubernetes Secret volume (`tls.crt ->
..data/tls.crt`, `..data -> ..<version>`), so a rotation is one atomic rename, as kubelet does it.
One rotation is written non-atomically in place (key first, then, once the server has tried and
refused the half-written pair, the certificate), the way a careless tool would; the server must
keep serving the old pair until the new one is whole. Every step waits for an event (requests
answered, handshakes made, a log line), never for a time.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from cryptography import x509

from tests.robustness.conftest import (
    SOAK_SECONDS,
    Connection,
    assert_admission_review,
    review,
    run_async,
    single_host_pod,
    write_figures,
)
from tests.support.webhook_process import WebhookProcess, make_certs
from webhook.certificates.create import KeyPair, make_serving_cert

pytestmark = pytest.mark.slow

KEEP_ALIVE_CLIENTS = 8
RECONNECTING_CLIENTS = 2
ATOMIC_SWAPS = max(4, int(SOAK_SECONDS // 4))
HALF_WRITTEN = "new certificate files not usable yet"  # the server saw a half-written pair
BODY = orjson.dumps(review(single_host_pod(), uid="rotation"))


def serial_of(pem: bytes) -> int:
    return int(x509.load_pem_x509_certificate(pem).serial_number)


class SecretVolume:
    """tls.crt and tls.key as kubelet mounts a Secret: symlinks through `..data`."""

    def __init__(self, directory: Path, ca: KeyPair) -> None:
        self.directory = directory
        self.ca = ca
        self.version = 0
        self.server: WebhookProcess | None = None

    def lay_out(self) -> int:
        serial = self.swap()
        for name in ("tls.crt", "tls.key"):
            link = self.directory / f"{name}.link"
            link.symlink_to(Path("..data") / name)
            os.replace(link, self.directory / name)
        return serial

    def swap(self) -> int:
        """A new serving certificate from the same CA, published by one atomic rename."""
        pair = make_serving_cert(self.ca, ["localhost"], ["127.0.0.1"])
        self.version += 1
        target = self.directory / f"..v{self.version}"
        target.mkdir()
        (target / "tls.crt").write_bytes(pair.cert_pem)
        (target / "tls.key").write_bytes(pair.key_pem)
        (target / "tls.key").chmod(0o600)
        link = self.directory / "..data_tmp"
        link.symlink_to(target.name)
        os.replace(link, self.directory / "..data")
        return serial_of(pair.cert_pem)

    async def write_in_place(self, first: str) -> int:
        """Overwrite the live files one after the other, `first` ("tls.key"/"tls.crt") first."""
        pair = make_serving_cert(self.ca, ["localhost"], ["127.0.0.1"])
        data = {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem}
        second = "tls.crt" if first == "tls.key" else "tls.key"
        assert self.server is not None
        seen = self.server.logs().count(HALF_WRITTEN)
        (self.directory / first).write_bytes(data[first])
        await until(
            lambda: self.server is not None and self.server.logs().count(HALF_WRITTEN) > seen
        )
        (self.directory / second).write_bytes(data[second])
        return serial_of(pair.cert_pem)


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not within the timeout"
        await asyncio.sleep(0.01)


class Traffic:
    def __init__(self, server: WebhookProcess) -> None:
        self.server = server
        self.sent = 0
        self.handshakes = 0
        self.failures: list[str] = []
        self.stop = asyncio.Event()

    async def keep_alive(self) -> None:
        connection = await Connection.open(self.server.port, self.server.ssl_context())
        try:
            while not self.stop.is_set():
                await self.one(connection)
        finally:
            await connection.close()

    async def reconnecting(self) -> None:
        """A new TLS connection per request: every handshake meets the current certificate."""
        while not self.stop.is_set():
            try:
                connection = await Connection.open(self.server.port, self.server.ssl_context())
            except (OSError, TimeoutError) as error:
                self.failures.append(f"handshake: {error!r}")
                await asyncio.sleep(0.05)
                continue
            self.handshakes += 1
            try:
                await self.one(connection)
            finally:
                await connection.close()

    async def one(self, connection: Connection) -> None:
        try:
            reply = await connection.post("/mutate", BODY, timeout=10)
            assert reply.status == 200, reply.status
            assert_admission_review(reply.body, "rotation")
            self.sent += 1
        except (OSError, AssertionError, TimeoutError) as error:
            self.failures.append(repr(error))
            await asyncio.sleep(0.05)

    async def more(self, handshakes: int, requests: int) -> None:
        """Wait until this many more handshakes and requests have succeeded."""
        want = (self.handshakes + handshakes, self.sent + requests)
        await until(lambda: self.handshakes >= want[0] and self.sent >= want[1])

    async def serial_of_a_new_connection(self) -> int | None:
        try:
            connection = await Connection.open(self.server.port, self.server.ssl_context())
        except (OSError, TimeoutError) as error:
            self.failures.append(f"probe handshake: {error!r}")
            return None
        try:
            return connection.peer_serial()
        finally:
            await connection.close()

    async def wait_for_serial(self, serial: int, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self.serial_of_a_new_connection() == serial:
                return True
            await asyncio.sleep(0.05)
        return False


def start_server(tmp_path: Path) -> tuple[WebhookProcess, SecretVolume, int]:
    ca = make_certs(tmp_path)
    volume = SecretVolume(tmp_path, ca)
    first = volume.lay_out()
    volume.server = WebhookProcess(tmp_path).start()
    return volume.server, volume, first


@pytest.mark.timeout(60 + 3 * SOAK_SECONDS)
def test_rotations_under_load_fail_no_request_and_reach_new_connections(tmp_path: Path) -> None:
    server, volume, first = start_server(tmp_path)
    expected, seen = [first], []

    async def run() -> Traffic:
        traffic = Traffic(server)
        tasks = [asyncio.ensure_future(traffic.keep_alive()) for _ in range(KEEP_ALIVE_CLIENTS)]
        tasks += [
            asyncio.ensure_future(traffic.reconnecting()) for _ in range(RECONNECTING_CLIENTS)
        ]
        try:
            await until(lambda: traffic.sent >= 50 and traffic.handshakes >= 5)
            seen.append(await traffic.serial_of_a_new_connection())
            for step in range(ATOMIC_SWAPS + 2):
                if step == ATOMIC_SWAPS // 2:
                    expected.append(await volume.write_in_place(first="tls.key"))
                else:
                    expected.append(volume.swap())
                if await traffic.wait_for_serial(expected[-1]):
                    seen.append(expected[-1])
                await traffic.more(handshakes=4, requests=20)  # under the new certificate
        finally:
            traffic.stop.set()
            await asyncio.gather(*tasks)
        return traffic

    try:
        traffic = run_async(run())
    finally:
        code = server.stop()
    write_figures(
        tmp_path / "rotation-figures.json",
        "rotation",
        {
            "requests": traffic.sent,
            "handshakes": traffic.handshakes,
            "swaps": len(expected) - 1,
            "failures": len(traffic.failures),
            "serials_expected": len(expected),
            "serials_seen": len(seen),
        },
    )
    assert traffic.failures == []
    assert seen == expected, "every rotation is served to new connections, in order"
    assert traffic.sent > 100
    assert traffic.handshakes > 10
    assert code == 0
    assert server.logs().count("serving certificate reloaded") >= len(expected) - 1


@pytest.mark.timeout(60)
def test_a_certificate_written_before_its_key_breaks_no_new_handshake(tmp_path: Path) -> None:
    """Half-way (new cert, old key) the server must keep serving the old pair.

    OpenSSL drops the context's private key when `load_cert_chain` installs a certificate that
    does not match it, so loading the half-written pair into the live context must not happen.
    """
    server, volume, _ = start_server(tmp_path)

    async def run() -> tuple[Traffic, bool]:
        traffic = Traffic(server)
        tasks = [asyncio.ensure_future(traffic.reconnecting()) for _ in range(2)]
        tasks.append(asyncio.ensure_future(traffic.keep_alive()))
        try:
            await until(lambda: traffic.sent >= 10 and traffic.handshakes >= 4)
            serial = await volume.write_in_place(first="tls.crt")
            reached = await traffic.wait_for_serial(serial)
            await traffic.more(handshakes=4, requests=0)  # under the new pair
        finally:
            traffic.stop.set()
            await asyncio.gather(*tasks)
        return traffic, reached

    try:
        traffic, reached = run_async(run())
    finally:
        server.stop()
    assert traffic.failures == [], f"{len(traffic.failures)} failures: {traffic.failures[:3]}"
    assert reached
