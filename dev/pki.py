"""The control plane's certificates and keys: a CA (the webhook's own CA maker), the API
server's serving pair, an admin client (system:masters), the ServiceAccount signing key, and the
kubeconfig that presents the admin client.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.certificates.create import make_ca

APISERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", "10.0.0.1")  # loopback, and the first of the Service range
_LEAF_USAGE = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=False,
    crl_sign=False,
    encipher_only=False,
    decipher_only=False,
)


def key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class ClusterCA:
    """A CA valid for a week, issuing leaf certificates valid for a week."""

    def __init__(self) -> None:
        pair = make_ca("tpu-webhook-e2e-ca", days=7)  # the webhook's own CA maker
        key = serialization.load_pem_private_key(pair.key_pem, password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        self.key = key
        self.cert = pair.certificate

    def issue(
        self,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
    ) -> tuple[bytes, bytes]:
        """Return (cert PEM, key PEM) for a leaf certificate signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_LEAF_USAGE, critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if usages:
            builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ip_addresses]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert_pem(cert), key_pem(key)


@dataclass(frozen=True)
class Pki:
    """The control plane's files (in one directory) and the admin client's pair."""

    ca: ClusterCA
    ca_crt: Path
    apiserver_crt: Path
    apiserver_key: Path
    admin_crt: Path
    admin_key: Path
    sa_key: Path  # signs ServiceAccount tokens (kube-controller-manager, kube-apiserver)
    sa_pub: Path  # verifies them (kube-apiserver)
    admin_pair: tuple[bytes, bytes]


def write_pki(directory: Path) -> Pki:
    """A new CA and every certificate and key of the control plane, written to `directory`
    (keys readable by the owner only)."""

    def write(name: str, data: bytes, mode: int = 0o600) -> Path:
        path = directory / name
        path.write_bytes(data)
        path.chmod(mode)
        return path

    ca = ClusterCA()
    server = ca.issue(
        "kube-apiserver", dns_names=APISERVER_NAMES, ip_addresses=APISERVER_IPS, server=True
    )
    admin = ca.issue("e2e-admin", organizations=("system:masters",), client=True)
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    return Pki(
        ca=ca,
        ca_crt=write("ca.crt", cert_pem(ca.cert), 0o644),
        apiserver_crt=write("apiserver.crt", server[0], 0o644),
        apiserver_key=write("apiserver.key", server[1]),
        admin_crt=write("admin.crt", admin[0], 0o644),
        admin_key=write("admin.key", admin[1]),
        sa_key=write("sa.key", key_pem(sa)),
        sa_pub=write("sa.pub", sa.public_key().public_bytes(*public), 0o644),
        admin_pair=admin,
    )


def kubeconfig(
    server: str, ca_pem: bytes, crt: bytes, key: bytes, user: str = "e2e-admin"
) -> dict[str, Any]:
    """A kubeconfig (context `e2e`) for `server`, trusting the CA `ca_pem`, presenting the
    client pair as `user` (the admin client's, the node's)."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(crt), "client-key-data": b64(key)},
            }
        ],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
        "current-context": "e2e",
        "preferences": {},
    }
