"""Certificates with `cryptography`: a CA and a serving certificate, as PEM bytes.

ECDSA P-256 keys (small, fast handshakes, accepted by every Kubernetes release in support).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE = "ca.crt", "ca.key", "tls.crt", "tls.key"


@dataclass(frozen=True, slots=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


def service_names(service: str, namespace: str) -> list[str]:
    """`svc`, `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`: how the API server may dial."""
    base = f"{service}.{namespace}"
    return [service, base, f"{base}.svc", f"{base}.svc.cluster.local"]


def make_ca(
    common_name: str = "tpu-webhook-ca", days: float = 3650, now: dt.datetime | None = None
) -> KeyPair:
    """A self-signed CA valid from `now` (default: the clock; backdated 5 minutes) for `days`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])
    now = now or dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(_pem(cert), _key_pem(key))


def make_serving_cert(
    ca: KeyPair,
    dns_names: Iterable[str],
    ips: Iterable[str] = (),
    days: float = 365,
    client: bool = False,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A leaf signed by `ca` for the given names (server auth; client auth too if asked), valid
    from `now` (default: the clock; backdated 5 minutes) for `days`."""
    names = list(dict.fromkeys(dns_names))
    addresses = [ipaddress.ip_address(ip) for ip in dict.fromkeys(ips)]
    ca_cert = ca.certificate
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key made by make_ca()")
    key = ec.generate_private_key(ec.SECP256R1())
    now = now or dt.datetime.now(dt.UTC)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [ExtendedKeyUsageOID.SERVER_AUTH]
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans += [x509.IPAddress(a) for a in addresses]
    subject = names[0] if names else (str(addresses[0]) if addresses else "tpu-webhook")
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject[:64])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return KeyPair(_pem(builder.sign(ca_key, hashes.SHA256())), _key_pem(key))


def write_pair(directory: Path, ca: KeyPair, serving: KeyPair) -> None:
    """ca.crt, ca.key, tls.crt, tls.key in `directory` (keys readable by the owner only)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data, mode in (
        (CA_FILE, ca.cert_pem, 0o644),
        (CA_KEY_FILE, ca.key_pem, 0o600),
        (CERT_FILE, serving.cert_pem, 0o644),
        (KEY_FILE, serving.key_pem, 0o600),
    ):
        path = directory / name
        temporary = path.with_suffix(path.suffix + ".tmp")
        temporary.write_bytes(data)
        temporary.chmod(mode)
        temporary.replace(path)


def ensure_dev_certs(directory: Path, dns_names: Iterable[str], ips: Iterable[str]) -> bool:
    """Development certificates in `directory`, made when missing or expiring; True if made."""
    names, addresses = list(dns_names), list(ips)
    files = [directory / n for n in (CA_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE)]
    if all(f.exists() for f in files) and _still_good(directory, names, addresses):
        return False
    ca = make_ca("tpu-webhook-dev-ca")
    write_pair(directory, ca, make_serving_cert(ca, names, addresses))
    return True


def _still_good(directory: Path, names: list[str], ips: list[str]) -> bool:
    try:
        cert = x509.load_pem_x509_certificate((directory / CERT_FILE).read_bytes())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    have = set(sans.get_values_for_type(x509.DNSName))
    have |= {str(a) for a in sans.get_values_for_type(x509.IPAddress)}
    fresh = cert.not_valid_after_utc - dt.datetime.now(dt.UTC) > dt.timedelta(days=7)
    return fresh and set(names) | set(ips) <= have


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
