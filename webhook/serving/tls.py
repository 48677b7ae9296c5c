"""The serving TLS context: TLS 1.2+, modern ciphers, reloaded when the files change on disk
(or, without files, loaded from memory by a `CertificateSource`).

`ssl.SSLContext.load_cert_chain` on the live context swaps the certificate for new handshakes;
connections already open keep theirs, so a rotation never fails a request in flight.

`problem()` is what readiness asks: nothing loaded, the served certificate expired, or files that
changed and could not be loaded for longer than a grace period (a rotation half written is
normal for a moment; a broken Secret that stays broken means the certificate the API server
expects is not the one served).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import os
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cryptography import x509

log = logging.getLogger("tpu_webhook.tls")

# ECDHE with AEAD only (TLS 1.3 suites are always on and not affected by this list).
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


class CertificateSource(Protocol):
    """Where the served certificate comes from when it is not a pair of mounted files (the
    selfManaged mode's Secret): it keeps a `ServingTLS` current and has its say in readiness."""

    async def run(self) -> None:
        """Keep the certificate current until cancelled (the app's lifespan runs it)."""

    def problem(self) -> str:
        """Why the server is not fit to serve ("" when it is), as /readyz reports it."""


@dataclass
class ServingTLS:
    cert_file: Path | None  # None: nothing is loaded until `load_pem` (a CertificateSource)
    key_file: Path | None
    client_ca_file: Path | None = None
    failing_grace_seconds: float = 60.0
    context: ssl.SSLContext = field(init=False)
    not_after: dt.datetime | None = field(init=False, default=None)
    reloads: int = field(init=False, default=0)
    failing_since: float | None = field(init=False, default=None)  # time.monotonic()
    last_error: str = field(init=False, default="")
    _fingerprint: bytes = field(init=False, default=b"")

    def __post_init__(self) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(CIPHERS)
        context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
        if self.client_ca_file is not None:
            context.load_verify_locations(cafile=str(self.client_ca_file))
            context.verify_mode = ssl.CERT_REQUIRED
        self.context = context
        if self.cert_file is not None:
            self._load(*self._read())

    @property
    def loaded(self) -> bool:
        return self.not_after is not None

    def problem(self, now: dt.datetime | None = None, monotonic: float | None = None) -> str:
        """Why the served certificate is not fit to serve ("" when it is)."""
        if self.not_after is None:
            return "no serving certificate loaded"
        now = now or dt.datetime.now(dt.UTC)
        if now >= self.not_after:
            return f"serving certificate expired at {self.not_after.isoformat()}"
        if self.failing_since is not None:
            failing = (time.monotonic() if monotonic is None else monotonic) - self.failing_since
            if failing >= self.failing_grace_seconds:
                return (
                    f"certificate files changed {failing:.0f} s ago and cannot be loaded: "
                    f"{self.last_error}"
                )
        return ""

    def reload_if_changed(self) -> bool:
        """Load the files again if their content changed; keep the old pair if the new is bad."""
        try:
            cert, key = self._read()
        except OSError as error:
            self._failed(f"cannot read certificate files: {error}")
            return False
        if hashlib.sha256(cert + key).digest() == self._fingerprint:
            self.failing_since = None  # back to the pair being served
            return False
        try:
            self._load(cert, key)
        except (ssl.SSLError, ValueError) as error:
            self._failed(f"new certificate files not usable yet: {error}")
            return False
        self.failing_since = None
        self.reloads += 1
        log.info("serving certificate reloaded, valid until %s", self.not_after)
        return True

    def load_pem(self, cert: bytes, key: bytes) -> bool:
        """Serve this pair from now on (True), or keep serving it (False: the same pair).

        Raises ssl.SSLError or ValueError, keeping the current pair, when it is not usable.
        """
        if hashlib.sha256(cert + key).digest() == self._fingerprint:
            return False
        self._load(cert, key)
        self.reloads += 1
        log.info("serving certificate loaded, valid until %s", self.not_after)
        return True

    def load_placeholder(self, cert: bytes, key: bytes) -> None:
        """Answer TLS handshakes (the kubelet's probes) with a throwaway pair until a real one is
        loaded; it does not count as loaded, so readiness still reports what is missing."""
        with _in_memory(cert) as cert_path, _in_memory(key) as key_path:
            self.context.load_cert_chain(cert_path, key_path)

    def _failed(self, error: str) -> None:
        log.warning("%s; keeping the current ones", error)
        self.last_error = error
        if self.failing_since is None:
            self.failing_since = time.monotonic()

    def _read(self) -> tuple[bytes, bytes]:
        if self.cert_file is None or self.key_file is None:
            raise OSError("no certificate files: the certificate comes from a CertificateSource")
        return self.cert_file.read_bytes(), self.key_file.read_bytes()

    def _load(self, cert: bytes, key: bytes) -> None:
        not_after = x509.load_pem_x509_certificate(cert).not_valid_after_utc
        # load_cert_chain reads files, and a failed load (a certificate whose key is not written
        # yet) leaves the live context without a usable key. So both loads read the very bytes
        # checked here, from memory-backed files, and the pair is tried on a scratch context
        # before the live one is touched.
        with _in_memory(cert) as cert_path, _in_memory(key) as key_path:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
            self.context.load_cert_chain(cert_path, key_path)
        self._fingerprint = hashlib.sha256(cert + key).digest()
        self.not_after = not_after


@contextlib.contextmanager
def _in_memory(data: bytes) -> Iterator[str]:
    """A path whose content is `data`, never written to disk (Linux memfd)."""
    fd = os.memfd_create("tpu-webhook-tls", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)
