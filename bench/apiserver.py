"""What kube-apiserver adds to an object before a mutating webhook sees it.

Scheme defaults (pkg/apis/core/v1/defaults.go, pkg/apis/batch/v1/defaults.go), the built-in
admission plugins that run before the webhooks (ServiceAccount, Priority,
DefaultTolerationSeconds, ExtendedResourceToleration as GKE enables it) and the managedFields
entry of the field manager. Quantities are strings, as the API server serializes them.
`metadata.uid`, `creationTimestamp` and a Job's generated selector are set after mutating
admission (in the registry's BeforeCreate), so only validating webhooks see them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]

SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
EXTENDED_RESOURCES = ("google.com/tpu", "nvidia.com/gpu")
# List fields that are maps keyed by these fields in server-side apply (the rest are atomic).
LIST_KEYS = {
    "containers": ("name",),
    "initContainers": ("name",),
    "env": ("name",),
    "ports": ("containerPort", "protocol"),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "ownerReferences": ("uid",),
}


def default_container(container: Mapping[str, Any]) -> Obj:
    out = copy.deepcopy(dict(container))
    image = str(out.get("image", ""))
    tag = image.rsplit("/", 1)[-1].partition(":")[2]
    out.setdefault("imagePullPolicy", "Always" if tag in ("", "latest") else "IfNotPresent")
    out.setdefault("terminationMessagePath", "/dev/termination-log")
    out.setdefault("terminationMessagePolicy", "File")
    for port in out.get("ports", []):
        port.setdefault("protocol", "TCP")
    for env in out.get("env", []):
        field_ref = env.get("valueFrom", {}).get("fieldRef")
        if field_ref is not None:
            field_ref.setdefault("apiVersion", "v1")
    resources = out.setdefault("resources", {})
    for section in resources.values():
        for name, value in section.items():
            section[name] = str(value)  # 4 -> "4", as a resource.Quantity serializes
    return out


def default_pod_spec(spec: Mapping[str, Any]) -> Obj:
    out = copy.deepcopy(dict(spec))
    for key in ("containers", "initContainers"):
        if key in out:
            out[key] = [default_container(c) for c in out[key]]
    out.setdefault("restartPolicy", "Always")
    out.setdefault("terminationGracePeriodSeconds", 30)
    out.setdefault("dnsPolicy", "ClusterFirst")
    out.setdefault("securityContext", {})
    out.setdefault("schedulerName", "default-scheduler")
    return out


def default_job(job: Mapping[str, Any]) -> Obj:
    out = copy.deepcopy(dict(job))
    spec = out["spec"]
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", spec["parallelism"])
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", None)
    if spec["completionMode"] == "Indexed" and "podFailurePolicy" not in spec:
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    template = spec["template"]
    template.setdefault("metadata", {})
    template["spec"] = default_pod_spec(template["spec"])
    out.setdefault("status", {})
    return out


def default_pod(pod: Mapping[str, Any]) -> Obj:
    """A Pod as decoded: scheme defaults only (what the field manager records)."""
    out = copy.deepcopy(dict(pod))
    out["spec"] = default_pod_spec(out["spec"])
    out["spec"].setdefault("enableServiceLinks", True)
    for key in ("containers", "initContainers"):
        for container in out["spec"].get(key, []):  # a Pod's requests default to its limits
            limits = container.get("resources", {}).get("limits")
            if limits:
                requests = container["resources"].setdefault("requests", {})
                for name, value in limits.items():
                    requests.setdefault(name, value)
    out.setdefault("status", {})
    return out


def admit_pod(pod: Mapping[str, Any], token_volume: str) -> Obj:
    """What the admission plugins that run before the mutating webhooks add to a Pod."""
    out = copy.deepcopy(dict(pod))
    spec = out["spec"]
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    spec.setdefault("volumes", []).append(_token_volume(token_volume))
    mount = {"name": token_volume, "readOnly": True, "mountPath": SERVICE_ACCOUNT_MOUNT}
    for container in spec.get("containers", []):
        container.setdefault("volumeMounts", []).append(dict(mount))
    spec["tolerations"] = [*spec.get("tolerations", []), *_tolerations(spec)]
    return out


def _token_volume(name: str) -> Obj:
    return {
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
            "defaultMode": 420,
        },
    }


def _tolerations(spec: Mapping[str, Any]) -> list[Obj]:
    requested = {
        name
        for c in spec.get("containers", [])
        for section in c.get("resources", {}).values()
        for name in section
    }
    extended = [
        {"key": name, "operator": "Exists", "effect": "NoSchedule"}
        for name in EXTENDED_RESOURCES
        if name in requested
    ]
    unreachable = [
        {"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute"}
        | {"tolerationSeconds": 300}
        for t in ("not-ready", "unreachable")
    ]
    return extended + unreachable


def managed_fields(manager: str, api_version: str, obj: Mapping[str, Any], time: str) -> Obj:
    """The managedFields entry of an Update by `manager` that set every field of `obj`."""
    owned = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status")}
    kept = ("generateName", "labels", "annotations", "ownerReferences", "finalizers")
    owned["metadata"] = {k: v for k, v in owned.get("metadata", {}).items() if k in kept}
    return {
        "manager": manager,
        "operation": "Update",
        "apiVersion": api_version,
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": _fields(owned),
    }


def _fields(value: Any, name: str = "") -> Obj:
    if isinstance(value, Mapping) and value:
        out: Obj = {".": {}} if name else {}
        for key, item in sorted(value.items()):
            out[f"f:{key}"] = _fields(item, key)
        if name in ("metadata", "spec", "template"):
            out.pop(".", None)
        return out
    if isinstance(value, list) and name == "finalizers":  # a set: one entry per value
        return {".": {}} | {f'v:"{item}"': {} for item in value}
    if isinstance(value, list) and name in LIST_KEYS:
        out = {".": {}}
        for item in value:
            key = {k: item[k] for k in LIST_KEYS[name] if k in item}
            encoded = ",".join(f'"{k}":{_scalar(v)}' for k, v in key.items())
            out["k:{" + encoded + "}"] = {} if name == "ownerReferences" else _fields(item, "item")
        return out
    return {}


def _scalar(value: Any) -> str:
    return str(value) if isinstance(value, int) else f'"{value}"'
