"""selfManaged certificates, decided: what the Secret should hold next, given what it holds and
what the webhook configurations trust, and what the CA-only Secret should hold. Pure: no API
calls and no clock (`now` is passed in), so every step of a renewal is a unit test;
webhook/certificates/selfmanaged.py does the I/O.

The Secret's data: `ca.crt` every CA the configurations must trust, oldest first (their caBundle);
`ca.key` the key of the last of them, the one that signs; `tls.crt`/`tls.key` the serving pair.
Its annotations are the protocol's clock and the operator's lever: `tpu-webhook.io/renew` (set
any new value to renew now), `.../renewed` (the value acted upon), `.../ca-trusted-at` (when the
signing CA was first seen in every caBundle) and `.../issued-at` (when tls.crt was issued).

The CA-only Secret holds `ca.crt` alone, the same CAs, for clients that must trust the server
without being able to read its keys (a metrics collector).

A new CA never makes a server present a certificate the API server does not trust yet:
1. stage: the new CA joins ca.crt (older ones stay) and becomes the signer; tls.crt is kept;
2. publish: replicas write ca.crt into both configurations' caBundle (selfmanaged.py);
3. once it is in every caBundle, `ca-trusted-at` is recorded, and `propagation` later (every API
   server has loaded the new bundle) tls.crt is issued by the new CA;
4. replicas serve it, each only once its CA is in every caBundle it reads;
5. `overlap` after the issue (every replica serves it by then) the older CAs leave ca.crt.
A new serving certificate from a CA already trusted (the routine renewal) needs none of this.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from webhook.certificates.create import CA_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE, KeyPair, make_ca
from webhook.certificates.create import make_serving_cert as make_leaf

RENEW = "tpu-webhook.io/renew"
RENEWED = "tpu-webhook.io/renewed"
TRUSTED_AT = "tpu-webhook.io/ca-trusted-at"
ISSUED_AT = "tpu-webhook.io/issued-at"
#: A certificate is renewed once this part of its lifetime is left (cert-manager's default).
RENEW_WHEN_LEFT = 1 / 3

Trusted = Sequence[Collection[x509.Certificate]]  # per configuration: the CAs all entries trust


@dataclass(frozen=True)
class Plan:
    """What the certificates must be: names, lifetimes and the protocol's waits."""

    dns_names: tuple[str, ...]
    ca_days: float = 365
    cert_days: float = 90
    propagation: dt.timedelta = dt.timedelta(seconds=60)
    overlap: dt.timedelta = dt.timedelta(seconds=600)
    ca_name: str = "tpu-webhook-ca"


@dataclass(frozen=True)
class Change:
    """A write of the Secret: the whole new data, and annotations to set (None: remove)."""

    reason: str
    data: Mapping[str, bytes]
    annotations: Mapping[str, str | None]


@dataclass(frozen=True)
class Stored:
    """What the Secret holds, parsed; what does not parse counts as absent."""

    cas: tuple[x509.Certificate, ...] = ()
    ca_key: bytes = b""
    cert: bytes = b""
    key: bytes = b""
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def bundle(self) -> bytes:
        """ca.crt as the configurations' caBundle carries it (PEM, oldest first)."""
        return pem(self.cas)

    def signer(self, now: dt.datetime) -> KeyPair | None:
        """The last CA with its key, if they match and it has not expired."""
        if not self.cas or not _unexpired(self.cas[-1], now):
            return None
        pair = KeyPair(pem([self.cas[-1]]), self.ca_key)
        return pair if _key_matches(pair) else None

    def leaf(self) -> x509.Certificate | None:
        """tls.crt, if tls.key is its key."""
        if not self.cert or not _key_matches(KeyPair(self.cert, self.key)):
            return None
        return x509.load_pem_x509_certificate(self.cert)

    def issuer(self, leaf: x509.Certificate) -> x509.Certificate | None:
        """The CA of ca.crt that signed `leaf`."""
        return next((ca for ca in self.cas if _signed_by(leaf, ca)), None)

    def time(self, annotation: str) -> dt.datetime | None:
        """An annotation's time (RFC 3339; UTC when it names no zone), None if absent or bad."""
        try:
            moment = dt.datetime.fromisoformat(self.annotations[annotation])
        except (KeyError, ValueError):
            return None
        return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def read_secret(data: Mapping[str, bytes], annotations: Mapping[str, str]) -> Stored:
    return Stored(
        cas=tuple(parse_bundle(data.get(CA_FILE, b""))),
        ca_key=data.get(CA_KEY_FILE, b""),
        cert=data.get(CERT_FILE, b""),
        key=data.get(KEY_FILE, b""),
        annotations=dict(annotations),
    )


def parse_bundle(data: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM bundle, duplicates once; [] when it does not parse."""
    try:
        return list(dict.fromkeys(x509.load_pem_x509_certificates(data)))
    except ValueError:
        return []


def pem(certificates: Iterable[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)


def renewal_due(certificate: x509.Certificate, now: dt.datetime) -> bool:
    """True once a third (RENEW_WHEN_LEFT) of the certificate's lifetime is left."""
    start, end = certificate.not_valid_before_utc, certificate.not_valid_after_utc
    return now >= end - (end - start) * RENEW_WHEN_LEFT


def trusted_everywhere(ca: x509.Certificate, trusted: Trusted) -> bool:
    return all(ca in cas for cas in trusted)


def merge_bundle(
    kept: Iterable[x509.Certificate], new: Iterable[x509.Certificate], now: dt.datetime
) -> tuple[x509.Certificate, ...]:
    """`kept` then `new`, each certificate once, without the expired ones."""
    return tuple(c for c in dict.fromkeys([*kept, *new]) if _unexpired(c, now))


def next_change(stored: Stored, trusted: Trusted, now: dt.datetime, plan: Plan) -> Change | None:
    """The one write the Secret needs next, or None. `trusted`: per managed configuration, the
    CAs every one of its entries trusts (its caBundle as read just now)."""
    signer = stored.signer(now)
    if signer is None:
        return _bootstrap(stored, trusted, now, plan)
    leaf = stored.leaf()
    current = leaf is not None and stored.issuer(leaf) == signer.certificate
    if _renewal_requested(stored):
        if not current:  # a renewal is under way: it is the answer
            reason = "renewal requested: the one under way answers it"
            return Change(reason, _data(stored), _honoured(stored))
        return _stage(stored, now, plan, f"renewal requested ({RENEW}={stored.annotations[RENEW]})")
    if leaf is None or not current:
        return _advance(stored, signer, trusted, now, plan)
    if renewal_due(signer.certificate, now):
        return _stage(stored, now, plan, "CA renewal due")
    if renewal_due(leaf, now) or not _names_covered(leaf, plan.dns_names):
        return _issue(stored, signer, now, plan, "serving certificate renewal due")
    return _retire(stored, signer.certificate, now, plan)


def public_data(stored: Stored, published: Mapping[str, bytes]) -> dict[str, bytes] | None:
    """What the CA-only Secret must hold next: ca.crt, the CAs of the Secret's ca.crt (what the
    caBundles carry), and no other key (never a private key). None when it holds exactly that,
    or when the Secret has no CA yet."""
    if not stored.cas:
        return None
    wanted = {CA_FILE: stored.bundle}
    return None if dict(published) == wanted else wanted


def _bootstrap(stored: Stored, trusted: Trusted, now: dt.datetime, plan: Plan) -> Change:
    """No usable CA: make one. CAs still trusted somewhere stay in ca.crt (a server may still
    present a certificate from them); if there are none, nothing can break, so the serving
    certificate is issued at once."""
    kept = merge_bundle(stored.cas, (ca for cas in trusted for ca in cas), now)
    ca = _mint_ca(now, plan)
    data = _data(stored, cas=(*kept, ca.certificate), ca_key=ca.key_pem)
    annotations = {**_honoured(stored), TRUSTED_AT: None}
    if kept:
        reason = "no usable CA in the Secret: new CA staged, the CAs trusted now are kept"
        return Change(reason, data, annotations)
    leaf = make_leaf(ca, plan.dns_names, days=plan.cert_days, now=now)
    data = {**data, CERT_FILE: leaf.cert_pem, KEY_FILE: leaf.key_pem}
    return Change("first CA and serving certificate", data, {**annotations, ISSUED_AT: _iso(now)})


def _stage(stored: Stored, now: dt.datetime, plan: Plan, reason: str) -> Change:
    """A new CA joins ca.crt and signs from now on; the served certificate stays as it is."""
    ca = _mint_ca(now, plan)
    cas = merge_bundle(stored.cas, [ca.certificate], now)
    annotations = {**_honoured(stored), TRUSTED_AT: None}
    data = _data(stored, cas=cas, ca_key=ca.key_pem)
    return Change(f"{reason}: new CA staged", data, annotations)


def _advance(
    stored: Stored, signer: KeyPair, trusted: Trusted, now: dt.datetime, plan: Plan
) -> Change | None:
    """The signer has not issued the served certificate yet: it does once it has been in every
    caBundle for `propagation`."""
    since = stored.time(TRUSTED_AT)
    if not trusted_everywhere(signer.certificate, trusted):
        if since is None:
            return None  # the replicas publish ca.crt; then it is trusted
        return Change("signing CA missing from a caBundle again", _data(stored), {TRUSTED_AT: None})
    if since is None:
        return Change("signing CA is in every caBundle", _data(stored), {TRUSTED_AT: _iso(now)})
    if now < since + plan.propagation:
        return None
    return _issue(stored, signer, now, plan, "serving certificate from the new CA")


def _issue(stored: Stored, signer: KeyPair, now: dt.datetime, plan: Plan, reason: str) -> Change:
    left = (signer.certificate.not_valid_after_utc - now) / dt.timedelta(days=1)
    leaf = make_leaf(signer, plan.dns_names, days=min(plan.cert_days, left), now=now)
    data = {**_data(stored), CERT_FILE: leaf.cert_pem, KEY_FILE: leaf.key_pem}
    return Change(reason, data, {TRUSTED_AT: None, ISSUED_AT: _iso(now)})


def _retire(
    stored: Stored, signer: x509.Certificate, now: dt.datetime, plan: Plan
) -> Change | None:
    """Older (or expired) CAs leave ca.crt `overlap` after the current certificate's issue."""
    if stored.cas == (signer,):
        return None
    issued = stored.time(ISSUED_AT)
    if issued is None:
        reason = "issue time unknown: the overlap starts now"
        return Change(reason, _data(stored), {ISSUED_AT: _iso(now)})
    if now < issued + plan.overlap:
        return None
    return Change("older CAs retired", _data(stored, cas=(signer,)), {})


def _renewal_requested(stored: Stored) -> bool:
    requested = stored.annotations.get(RENEW, "")
    return bool(requested) and requested != stored.annotations.get(RENEWED, "")


def _honoured(stored: Stored) -> dict[str, str | None]:
    """The annotation that marks a renewal request as acted upon (none without a request)."""
    return {RENEWED: stored.annotations[RENEW]} if _renewal_requested(stored) else {}


def _data(
    stored: Stored, cas: Sequence[x509.Certificate] | None = None, ca_key: bytes | None = None
) -> dict[str, bytes]:
    return {
        CA_FILE: pem(stored.cas if cas is None else cas),
        CA_KEY_FILE: stored.ca_key if ca_key is None else ca_key,
        CERT_FILE: stored.cert,
        KEY_FILE: stored.key,
    }


def _mint_ca(now: dt.datetime, plan: Plan) -> KeyPair:
    stamp = now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # tells the CAs apart
    name = f"{plan.ca_name[: 63 - len(stamp)]} {stamp}"  # a common name has 64 characters
    return make_ca(name, days=plan.ca_days, now=now)


def _iso(now: dt.datetime) -> str:
    """RFC 3339 in UTC, to the millisecond: 2026-01-31T12:00:00.250Z."""
    return now.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _unexpired(certificate: x509.Certificate, now: dt.datetime) -> bool:
    return now < certificate.not_valid_after_utc


def _signed_by(leaf: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _names_covered(leaf: x509.Certificate, names: Iterable[str]) -> bool:
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return set(names) <= set(sans.get_values_for_type(x509.DNSName))


def _key_matches(pair: KeyPair) -> bool:
    """The certificate parses, the key parses, and it is the certificate's key."""
    try:
        public = pair.certificate.public_key()
        key = serialization.load_pem_private_key(pair.key_pem, password=None)
    except (ValueError, TypeError):
        return False
    raw = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return bool(key.public_key().public_bytes(*raw) == public.public_bytes(*raw))
