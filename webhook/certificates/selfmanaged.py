"""selfManaged certificates: the server keeps its own CA and serving certificate in a Secret and
the caBundle of its webhook configurations current, through the Kubernetes API.

The design is open-policy-agent/cert-controller's (Gatekeeper, JobSet, LeaderWorkerSet): the
chart renders the Secret empty, every replica reconciles the same Secret and the two named
configurations, writes are conditional on the resourceVersion read (one writer wins, the others
adopt what is stored), and a replica is ready once the caBundles trust what it serves. Two things
differ, for its known gaps (cert-controller issues 13 and 50): a CA is renewed with both CAs
trusted during the overlap (as Kyverno keeps a CA list), in the order of rotation.py; and the
certificate is read through the API and loaded from memory, not from a mounted Secret that the
kubelet refreshes 30-100 s later.

Imported only in this mode (webhook.serving.server imports it lazily): the `kubernetes` client
costs start-up time the other modes do not pay. Every call runs in a worker thread; the served
certificate is swapped on the event loop, as the file watcher does it.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cryptography import x509

from webhook.certificates.create import CA_FILE, make_ca, service_names
from webhook.certificates.kubeapi import ApiError, Conflict, KubeApi
from webhook.certificates.rotation import (
    Change,
    Plan,
    Stored,
    next_change,
    parse_bundle,
    public_data,
    read_secret,
    trusted_everywhere,
)
from webhook.registration import MUTATING, VALIDATING, Configuration
from webhook.settings import Settings

log = logging.getLogger("tpu_webhook.certificates")

MAX_WRITES = 6  # Secret writes one pass may make (a renewal's steps that need no waiting)


class Served(Protocol):
    """What serves the certificate (webhook.serving.tls.ServingTLS): a pair to serve from now on,
    and a throwaway pair to answer handshakes with until then."""

    def load_pem(self, cert: bytes, key: bytes) -> bool: ...

    def load_placeholder(self, cert: bytes, key: bytes) -> None: ...


@dataclass(frozen=True)
class Target:
    namespace: str
    secret: str
    configurations: tuple[tuple[Configuration, str], ...]  # (kind, name)
    ca_secret: str = ""  # the CA-only Secret (ca.crt alone), if any

    @property
    def where(self) -> str:
        return f"Secret {self.namespace}/{self.secret}"


@dataclass(frozen=True)
class Serve:
    """What a pass found fit to serve: a pair whose CA every caBundle trusts."""

    cert: bytes
    key: bytes
    issuer: x509.Certificate


class SecretCertificates:
    """The CertificateSource of the selfManaged mode (see the module docstring)."""

    def __init__(
        self,
        tls: Served,
        api: KubeApi,
        target: Target,
        plan: Plan,
        *,
        sync_seconds: float,
        failing_seconds: float,
    ) -> None:
        self.tls, self.api, self.target, self.plan = tls, api, target, plan
        self.sync_seconds = sync_seconds
        self.failing_seconds = failing_seconds
        # A pass never publishes a Secret it read longer ago than this: a replica stalled
        # between its read and its write cannot put back a bundle that lacks a newer CA.
        self.max_view_age = max(1.0, plan.propagation.total_seconds() / 2)
        self.issuer: x509.Certificate | None = None  # of the served certificate
        self.error = ""
        self.confirmed_at: float | None = None  # time.monotonic() of the last good pass
        self.writes = 0
        self.conflicts = 0
        self.public_error = ""  # of the last copy into the CA-only Secret

    @classmethod
    def from_settings(cls, settings: Settings, tls: Served) -> SecretCertificates:
        names = tuple(service_names(settings.cert_service, settings.cert_secret_namespace))
        configurations = tuple(
            (kind, name)
            for kind, name in (
                (MUTATING, settings.cert_mutating_configuration),
                (VALIDATING, settings.cert_validating_configuration),
            )
            if name
        )
        target = Target(
            settings.cert_secret_namespace,
            settings.cert_secret,
            configurations,
            settings.cert_ca_secret,
        )
        plan = Plan(
            dns_names=names,
            ca_days=settings.cert_ca_validity_days,
            cert_days=settings.cert_validity_days,
            propagation=dt.timedelta(seconds=settings.cert_propagation_seconds),
            overlap=dt.timedelta(seconds=settings.cert_overlap_seconds),
            ca_name=f"{settings.cert_service}.{settings.cert_secret_namespace} CA",
        )
        placeholder = make_ca("tpu-webhook placeholder (not ready)", days=1)
        tls.load_placeholder(placeholder.cert_pem, placeholder.key_pem)
        return cls(
            tls,
            KubeApi.connect(settings.kubeconfig),
            target,
            plan,
            sync_seconds=settings.cert_sync_seconds,
            failing_seconds=settings.cert_reload_failing_seconds,
        )

    # ------------------------------------------------------------- the CertificateSource

    async def run(self) -> None:
        """A pass every sync_seconds, the first at once; a bug in one is logged and the next
        pass comes (readiness turns 503 if they keep failing)."""
        while True:
            try:
                serve = await asyncio.to_thread(self.sync)
                if serve is not None:
                    self.serve(serve)
            except Exception:
                log.exception("certificates: the pass failed")
            await asyncio.sleep(self.sync_seconds)

    def problem(self) -> str:
        if self.issuer is None:
            why = f": {self.error}" if self.error else ""
            return f"no serving certificate from {self.target.where} yet{why}"
        if self.confirmed_at is None:
            return f"{self.target.where} not read yet"
        late = time.monotonic() - self.confirmed_at
        if late > self.failing_seconds:
            return (
                f"{self.target.where} and the caBundles not confirmed for {late:.0f} s: "
                f"{self.error or 'the served certificate is not trusted by every caBundle'}"
            )
        return ""

    def serve(self, serve: Serve) -> None:
        """On the event loop: switch the served certificate (the TLS context is not shared with
        the worker thread)."""
        try:
            self.tls.load_pem(serve.cert, serve.key)
        except (ValueError, OSError) as error:  # ssl.SSLError is an OSError
            self._failed(f"the certificate in {self.target.where} cannot be served: {error}")
            return
        self.issuer = serve.issuer

    # ------------------------------------------------------------------------ one pass

    def sync(self) -> Serve | None:
        """Read the Secret and the configurations, write what the Secret needs next until it
        needs nothing, publish its ca.crt, and say what to serve. Never raises."""
        try:
            stored, trusted = self._converge()
        except Exception as error:  # every failure is reported by readiness and the log
            known = isinstance(error, ApiError)
            self._failed(str(error) if known else f"{type(error).__name__}: {error}")
            return None
        self._copy_public(stored)
        serve = self._servable(stored, trusted)
        issuer = serve.issuer if serve is not None else self.issuer
        if issuer is not None and trusted_everywhere(issuer, trusted):
            self.confirmed_at = time.monotonic()
            if self.error:
                log.info("certificates: %s and the caBundles are in order again", self.target.where)
            self.error = ""
        return serve

    def _converge(self) -> tuple[Stored, list[frozenset[x509.Certificate]]]:
        for _ in range(MAX_WRITES):
            secret = self.api.read_secret(self.target.namespace, self.target.secret)
            read_at = time.monotonic()
            stored = stored_of(secret)
            trusted = self._publish(stored, read_at)
            change = next_change(stored, trusted, dt.datetime.now(dt.UTC), self.plan)
            if change is None:
                return stored, trusted
            try:
                self.write(secret, change)
            except Conflict:
                self.conflicts += 1
                log.info("certificates: %s changed since read; adopting it", self.target.where)
        return stored, trusted

    def write(self, secret: Mapping[str, Any], change: Change) -> None:
        """Patch the Secret as `change` says, if it is still the version `secret` was read at
        (Conflict otherwise)."""
        metadata = secret.get("metadata", {})
        old = secret.get("data") or {}
        data = {k: _b64(v) if v else None for k, v in change.data.items()}
        patch = {
            "metadata": {
                "resourceVersion": metadata.get("resourceVersion"),
                "annotations": dict(change.annotations),
            },
            "data": {k: v for k, v in data.items() if old.get(k) != v},
        }
        self.api.patch_secret(self.target.namespace, self.target.secret, patch)
        self.writes += 1
        log.info("certificates: wrote %s: %s", self.target.where, change.reason)

    def _copy_public(self, stored: Stored) -> None:
        """Make the CA-only Secret hold ca.crt alone, the CAs of the Secret's. A failure is
        logged and tried again next pass; readiness never depends on it (admission does not)."""
        name = self.target.ca_secret
        if not name:
            return
        where = f"Secret {self.target.namespace}/{name}"
        try:
            secret = self.api.read_secret(self.target.namespace, name)
            data = public_data(stored, _decoded(secret))
            if data is not None:
                old = secret.get("data") or {}
                patch = {
                    "metadata": {"resourceVersion": secret["metadata"]["resourceVersion"]},
                    "data": {k: (_b64(data[k]) if k in data else None) for k in {*old, *data}},
                }
                self.api.patch_secret(self.target.namespace, name, patch)
                log.info("certificates: wrote %s: ca.crt is %s", where, _names(_b64(data[CA_FILE])))
        except ApiError as error:  # a Conflict too: another replica wrote it just now
            if str(error) != self.public_error:
                log.warning("certificates: %s not written: %s", where, error)
            self.public_error = str(error)
            return
        self.public_error = ""

    def _publish(self, stored: Stored, read_at: float) -> list[frozenset[x509.Certificate]]:
        """Make every configuration's caBundle the Secret's ca.crt; per configuration (absent
        ones and ones without entries call nothing), the CAs all its entries trust after."""
        bundle = _b64(stored.bundle) if stored.cas else ""
        trusted = []
        for kind, name in self.target.configurations:
            bundles = self._publish_to(kind, name, bundle, read_at)
            if bundles:
                trusted.append(_common(bundles))
        return trusted

    def _publish_to(self, kind: Configuration, name: str, bundle: str, read_at: float) -> set[str]:
        """The caBundles of the configuration's entries once `bundle` is published there."""
        for _ in range(2):  # a conflict: another replica patched it just now; read it again
            configuration = self.api.read_configuration(kind, name)
            entries = (configuration or {}).get("webhooks") or []
            bundles = {e.get("clientConfig", {}).get("caBundle", "") for e in entries}
            if configuration is None or not bundle or not entries or bundles == {bundle}:
                return bundles
            if time.monotonic() - read_at > self.max_view_age:
                raise ApiError(f"{self.target.where} was read too long ago to publish it")
            try:
                self.api.patch_configuration(kind, name, _bundle_patch(configuration, bundle))
            except Conflict:
                continue
            log.info("certificates: caBundle of %s %s is now %s", kind, name, _names(bundle))
            return {bundle}
        raise Conflict(f"{kind} {name} keeps changing; publishing again in the next pass")

    def _servable(
        self, stored: Stored, trusted: Sequence[frozenset[x509.Certificate]]
    ) -> Serve | None:
        leaf = stored.leaf()
        issuer = stored.issuer(leaf) if leaf is not None else None
        if leaf is None or issuer is None or not trusted_everywhere(issuer, trusted):
            return None
        if dt.datetime.now(dt.UTC) >= leaf.not_valid_after_utc:
            return None
        return Serve(stored.cert, stored.key, issuer)

    def _failed(self, error: str) -> None:
        if error != self.error:
            log.warning("certificates: %s", error)
        self.error = error


def stored_of(secret: Mapping[str, Any]) -> Stored:
    """The Secret as the API returns it (base64 data), parsed."""
    return read_secret(_decoded(secret), secret.get("metadata", {}).get("annotations") or {})


def _decoded(secret: Mapping[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _bundle_patch(configuration: Mapping[str, Any], bundle: str) -> dict[str, Any]:
    """A strategic merge patch (webhooks merge by name), conditional on the version read."""
    return {
        "metadata": {"resourceVersion": configuration["metadata"]["resourceVersion"]},
        "webhooks": [
            {"name": e["name"], "clientConfig": {"caBundle": bundle}}
            for e in configuration["webhooks"]
        ],
    }


def _common(bundles: set[str]) -> frozenset[x509.Certificate]:
    """The CAs that every one of the entries' caBundles holds."""
    sets = [frozenset(parse_bundle(base64.b64decode(b))) for b in bundles]
    return frozenset.intersection(*sets) if sets else frozenset()


def _names(bundle: str) -> str:
    """The CAs of a caBundle, by subject, for the log."""
    cas = parse_bundle(base64.b64decode(bundle))
    return ", ".join(repr(c.subject.rfc4514_string()) for c in cas)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
