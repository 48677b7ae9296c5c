"""The `kubernetes` Service for the Pods of the one-node cluster: its ClusterIP (10.0.0.1:443)
answered on the node and forwarded, byte for byte, to the API server on loopback.

The node has no kube-proxy, so a ClusterIP routes nowhere (the API server reaches webhook
Services by their endpoints itself, --enable-aggregator-routing). A Pod that calls the API, as the
selfManaged certificate mode does, uses the in-cluster configuration: KUBERNETES_SERVICE_HOST and
_PORT, which the kubelet sets from this Service, the token and kube-root-ca.crt it mounts. The
Pods route the Service range to the bridge (node_config.cni_config); here that address is added
to the loopback interface and a TCP forwarder listens on it. The TLS is the API server's own
(its certificate names 10.0.0.1), so the Pod verifies it and authenticates with its token as in
any cluster; only the transport is a stand-in for kube-proxy's rules.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import subprocess
import threading
from collections.abc import Iterator
from urllib.parse import urlparse

from dev.components import SERVICE_CLUSTER_IP_RANGE
from dev.controlplane import ControlPlane

PORT = 443


class Forwarder:
    """Accepts on `listen` and pipes each connection to `target` until either side closes."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server(listen, reuse_port=False)
        self.sockets: set[socket.socket] = set()
        self.connections = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="svc-forwarder", daemon=True)

    def start(self) -> Forwarder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.close()
        with self._lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:  # closed by stop()
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self.sockets |= {client, upstream}
                self.connections += 1
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def cluster_ip() -> str:
    """The `kubernetes` Service's ClusterIP: the first address of the Service range."""
    return str(next(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE).hosts()))


@contextlib.contextmanager
def kubernetes_service(cp: ControlPlane) -> Iterator[Forwarder]:
    """10.0.0.1:443 answered on this machine for as long as the context lasts."""
    ip = cluster_ip()
    service = cp.kubectl("get", "service", "kubernetes", "-n", "default", "-o", "json", check=True)
    assert f'"clusterIP": "{ip}"' in service.stdout, service.stdout
    port = urlparse(cp.server).port
    assert port is not None
    subprocess.run(["ip", "address", "replace", f"{ip}/32", "dev", "lo"], check=True)
    try:
        forwarder = Forwarder((ip, PORT), ("127.0.0.1", port)).start()
        try:
            yield forwarder
        finally:
            forwarder.stop()
    finally:
        subprocess.run(["ip", "address", "del", f"{ip}/32", "dev", "lo"], check=False)
