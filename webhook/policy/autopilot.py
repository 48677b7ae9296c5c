"""GKE Autopilot: what its admission (GKE Warden) certainly refuses of a TPU Pod, refused here
first with the field named, so a user meets it at `kubectl create` with the fix rather than
with Warden's constraint name. Applied under the `autopilot` profile (a setting, or detected
from the cluster: it serves Autopilot's `auto.gke.io` API).

Refused: a nodeSelector key Autopilot does not allow (the catalog's list), host namespaces
(hostNetwork, hostPID, hostIPC: autogke-disallow-hostnamespaces), host ports
(autogke-no-host-port). Warned: a privileged container (refused unless an allowlist admits the
workload). Autopilot's own TPU requirements (the TPU type and topology selectors, chips in
requests and limits) are the rules every profile applies.
"""

from __future__ import annotations

from webhook.catalog.tpu import Catalog
from webhook.policy.bounds import MAX_PORTS
from webhook.policy.paths import FieldPath
from webhook.policy.podspec import TpuSpec
from webhook.policy.violations import Violation, forbidden

HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")


def check(tpu: TpuSpec, catalog: Catalog) -> list[Violation]:
    found: list[Violation] = []
    selector = tpu.spec.get("nodeSelector")
    for key in sorted(catalog.autopilot.disallowed_node_selectors):
        if isinstance(selector, dict) and key in selector:
            found.append(
                _refused(
                    tpu.selector.key(key),
                    "GKE Autopilot does not allow this node selector "
                    "(autogke-node-affinity-selector-limitation): remove it; pick TPU nodes "
                    "with cloud.google.com/gke-tpu-accelerator and -topology, or a compute class",
                )
            )
    for name in HOST_NAMESPACES:
        if tpu.spec.get(name) is True:
            found.append(
                _refused(
                    tpu.at.child(name),
                    "GKE Autopilot refuses Pods in host namespaces "
                    "(autogke-disallow-hostnamespaces): remove it; the slice's hosts reach "
                    "each other through the Pod network and the headless Service",
                )
            )
    declared = 0
    for container in tpu.containers:
        ports = container.body.get("ports")
        for i, port in enumerate(ports if isinstance(ports, list) else ()):
            declared += 1
            if declared > MAX_PORTS:
                break
            if isinstance(port, dict) and port.get("hostPort"):
                found.append(
                    _refused(
                        container.path.child("ports").index(i).child("hostPort"),
                        "GKE Autopilot refuses host ports (autogke-no-host-port): remove it",
                    )
                )
        security = container.body.get("securityContext")
        if isinstance(security, dict) and security.get("privileged") is True:
            found.append(
                forbidden(
                    "tpu.autopilot-refused",
                    container.path.child("securityContext", "privileged"),
                    "GKE Autopilot refuses privileged containers unless a WorkloadAllowlist "
                    "admits the workload",
                    advisory=True,
                )
            )
    return found


def _refused(field: FieldPath, detail: str) -> Violation:
    return forbidden("tpu.autopilot-refused", field, detail)
