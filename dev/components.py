"""The command lines of the control plane's components: etcd, kube-apiserver and
kube-controller-manager, each on loopback with the certificates of dev/pki.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dev.pki import Pki

#: Controllers run by kube-controller-manager (names as in ``--help`` of 1.35).
DEFAULT_CONTROLLERS: tuple[str, ...] = (
    "job-controller",
    "cronjob-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "garbage-collector-controller",
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "ttl-after-finished-controller",
)

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


def etcd(bin_dir: Path, data_dir: Path, client_url: str, peer_url: str) -> list[str]:
    """One member, no fsync (a throw-away store)."""
    return [
        str(bin_dir / "etcd"),
        "--name=default",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=default={peer_url}",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver(
    bin_dir: Path, etcd_url: str, port: int, cert_dir: Path, pki: Pki, extra: Sequence[str]
) -> list[str]:
    """On 127.0.0.1:`port`, RBAC unless `extra` chooses the authorization mode."""
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        f"--tls-cert-file={pki.apiserver_crt}",
        f"--tls-private-key-file={pki.apiserver_key}",
        f"--client-ca-file={pki.ca_crt}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        *_default_authorization_mode(extra),
        "--allow-privileged=true",
        "--endpoint-reconciler-type=none",
        *extra,
    ]


def controller_manager(
    bin_dir: Path,
    kubeconfig: Path,
    controllers: Sequence[str],
    port: int,
    cert_dir: Path,
    pki: Pki,
    extra: Sequence[str],
) -> list[str]:
    """The given controllers, no leader election, its own port on 127.0.0.1."""
    return [
        str(bin_dir / "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--controllers={','.join(controllers)}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        f"--root-ca-file={pki.ca_crt}",
        f"--service-account-private-key-file={pki.sa_key}",
        *extra,
    ]


def _default_authorization_mode(extra: Sequence[str]) -> list[str]:
    """RBAC, unless the extra arguments choose (the flag appends: RBAC twice is refused)."""
    if any(a.startswith("--authorization-mode=") for a in extra):
        return []
    return ["--authorization-mode=RBAC"]
