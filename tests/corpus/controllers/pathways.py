"""Pathways' PathwaysJob (google/pathways-job, read at PATHWAYS, see common.py): its CRD defaults
and the JobSet its controller creates. That controller cannot be built here (its go.mod names the
module `pathways-job`, which the Go module proxy cannot serve), so nothing checks this model against
it; the e2e suite stores PathwaysJobs with a CRD written from the real one
(tests/e2e/data/crds/pathwaysjob.yaml).

One JobSet named as the PathwaysJob (internal/controller/pathwaysjob_controller.go createJobSet):
a `pathways-head` Job of one Pod (the Pathways resource manager and proxy, with the user's Pod
when `controller.template` is set) and a `worker` replicatedJob of `numSlices` Jobs, each the
hosts of one slice, with large backoffLimits on purpose (workers reconnect to the resource
manager). The machine type gives the accelerator and chips per host; a topology its table does not
list makes no JobSet (the PathwaysJob's status turns Failed, after the API server stored it).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from tests.corpus.controllers.common import (
    ACCELERATOR,
    TOPOLOGY,
    Obj,
    annotations_of,
    controller_ref,
    labels_of,
    name_of,
    namespace_of,
)

HEAD = "pathways-head"
RM_AND_WORKER_IMAGE = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server"
PROXY_IMAGE = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server"
PROXY_PORT, RM_PORT, WORKER_PORT = 29000, 29001, 29005
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
COORDINATOR = "metadata.labels['jobset.sigs.k8s.io/coordinator']"
#: MachineTypeToTPUVersionMap (the resource manager's --instance_type) and
#: MachineTypeToGKEAcceleratorTypeMap (the workers' accelerator selector).
TPU_VERSION = {
    "tpu7x-standard-4t": "tpu7x",
    "ct6e-standard-4t": "tpuv6e",
    "ct6e-standard-8t": "tpuv6e1t",
    "ct5p-hightpu-4t": "tpuv5",
    "ct5lp-hightpu-4t": "tpuv5e",
    "ct5lp-hightpu-8t": "tpuv5e1t",
    "ct4p-hightpu-4t": "tpuv4",
}
ACCELERATOR_OF = {
    "tpu7x-standard-4t": "tpu7x",
    "ct6e-standard-4t": "tpu-v6e-slice",
    "ct6e-standard-8t": "tpu-v6e-slice",
    "ct5p-hightpu-4t": "tpu-v5p-slice",
    "ct5lp-hightpu-4t": "tpu-v5-lite-podslice",
    "ct5lp-hightpu-8t": "tpu-v5-lite-podslice",
    "ct4p-hightpu-4t": "tpu-v4-podslice",
}


def _listed(topologies: str) -> frozenset[str]:
    return frozenset(topologies.split())


#: ValidTpuTopologiesMap, verbatim.
VALID_TOPOLOGIES: dict[str, frozenset[str]] = {
    "tpu7x-standard-4t": _listed(
        "12x12x12 12x12x16 12x12x20 12x12x24 12x12x28 12x12x36 12x16x16 12x16x20 12x16x24 "
        "12x16x28 12x20x20 12x20x24 12x24x24 16x16x16 16x16x20 16x16x24 16x16x32 16x20x28 "
        "16x24x24 2x2x1 2x2x2 2x2x4 2x4x4 4x12x116 4x12x12 4x12x124 4x12x20 4x12x28 4x12x44 "
        "4x12x52 4x12x68 4x12x76 4x12x92 4x20x20 4x20x28 4x20x44 4x20x52 4x20x68 4x20x76 "
        "4x28x28 4x28x44 4x28x52 4x4x116 4x4x12 4x4x124 4x4x148 4x4x164 4x4x172 4x4x188 4x4x20 "
        "4x4x212 4x4x236 4x4x244 4x4x28 4x4x4 4x4x44 4x4x52 4x4x68 4x4x76 4x4x8 4x4x92 4x8x116 "
        "4x8x12 4x8x124 4x8x148 4x8x164 4x8x172 4x8x188 4x8x20 4x8x28 4x8x44 4x8x52 4x8x68 "
        "4x8x76 4x8x8 4x8x92 8x12x12 8x12x16 8x12x20 8x12x28 8x12x44 8x12x52 8x16x16 8x16x20 "
        "8x16x28 8x16x44 8x20x20 8x20x28 8x8x12 8x8x16 8x8x20 8x8x28 8x8x44 8x8x52 8x8x68 "
        "8x8x76 8x8x8 8x8x92"
    ),
    "ct6e-standard-4t": _listed("1x1 2x2 2x4 4x4 4x8 8x8 8x16 16x16"),
    "ct6e-standard-8t": _listed("2x4"),
    "ct5p-hightpu-4t": _listed(
        "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x4x12 4x8x8 4x4x20 4x8x12 4x4x28 8x8x8 4x12x12 "
        "4x8x20 4x4x44 8x8x12 4x4x52 4x8x28 4x12x20 8x8x16 4x4x68 8x12x12 4x4x76 8x8x20 4x12x28 "
        "4x8x44 4x4x92 8x12x16 4x20x20 4x8x52 12x12x12 8x8x28 4x4x116 8x12x20 4x4x124 8x16x16 "
        "4x12x44 4x8x68 4x20x28 12x12x16 4x4x148 4x8x76 4x12x52 8x16x20 4x4x164 8x12x28 4x4x172 "
        "8x8x44 12x12x20 4x8x92 4x4x188 12x16x16 4x28x28 8x20x20 4x12x68 8x8x52 4x4x212 "
        "12x12x24 4x20x44 8x16x28 4x12x76 4x8x116 4x4x236 12x16x20 4x4x244 4x8x124 12x12x28 "
        "16x16x16 4x20x52 8x12x44 8x8x68 4x12x92 8x20x28 12x16x24 4x8x148 12x20x20 8x8x76 "
        "4x28x44 8x12x52 16x16x20 12x12x36 4x8x164 12x16x28 4x20x68 4x8x172 4x12x116 8x16x44 "
        "12x20x24 4x28x52 8x8x92 4x12x124 4x8x188 4x20x76 16x16x24 12x24x24 16x20x28"
    ),
    "ct5lp-hightpu-4t": _listed("2x2 2x4 4x4 4x8 8x8 8x16 16x16"),
    "ct5lp-hightpu-8t": _listed("2x4"),
    "ct4p-hightpu-4t": _listed(
        "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x8x8 4x4x16 8x8x8 8x8x12 8x8x16 4x16x16 8x16x16"
    ),
}


def default_pathwaysjob(pw: Obj) -> None:
    """PATHWAYS config/crd/bases/pathways-job.pathways.domain_pathwaysjobs.yaml defaults."""
    for worker in pw["spec"].get("workers") or []:
        worker.setdefault("maxSliceRestarts", 1)
    pw["spec"].setdefault("controller", {}).setdefault("mainContainerName", "main")


def slice_hosts(machine_type: str, topology: str) -> tuple[int, int]:
    """calculateVMsFromMachineTypeAndTopology: (VMs, chips per VM); 8 chips per VM on the two
    8-chip machine types, 4 on every other."""
    chips = math.prod(int(part) for part in topology.split("x"))
    per_vm = 8 if machine_type in ("ct6e-standard-8t", "ct5lp-hightpu-8t") else 4
    return (chips // per_vm if chips >= per_vm else 1), per_vm


def pathways_jobset(pw: Mapping[str, Any]) -> list[Obj]:
    """createJobSet: the head replicatedJob, the workers', a coordinator (the head's Pod), the
    head's success (when it runs the user's Pod), JobSet restarts up to `maxRestarts`, Jobs
    started in order (head first). Owned by the PathwaysJob; its labels and annotations."""
    spec = pw["spec"]
    worker = spec["workers"][0]
    if worker["topology"] not in VALID_TOPOLOGIES.get(worker["type"], ()):
        return []  # "invalid TPU topology for worker type": status Failed, no JobSet
    jobset_spec: Obj = {
        "startupPolicy": {"startupPolicyOrder": "InOrder"},
        "failurePolicy": {"maxRestarts": spec["maxRestarts"]} if spec.get("maxRestarts") else {},
        "coordinator": {"replicatedJob": HEAD},
        "replicatedJobs": [_head_job(pw), _worker_job(pw)],
    }
    if spec["controller"].get("template") is not None:
        jobset_spec["successPolicy"] = {"operator": "All", "targetReplicatedJobs": [HEAD]}
    metadata: Obj = {"name": name_of(pw), "namespace": namespace_of(pw)}
    if labels_of(pw):
        metadata["labels"] = labels_of(pw)
    if annotations_of(pw):
        metadata["annotations"] = annotations_of(pw)
    metadata["ownerReferences"] = [controller_ref(pw)]
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"}
    return [{**jobset, "metadata": metadata, "spec": jobset_spec}]


def _tpu_node_selector(pw: Mapping[str, Any]) -> dict[str, str]:
    """makeTPUNodeSelector: the workers' nodeSelector plus the accelerator and topology."""
    worker = pw["spec"]["workers"][0]
    return {
        **(worker.get("nodeSelector") or {}),
        ACCELERATOR: ACCELERATOR_OF[worker["type"]],
        TOPOLOGY: worker["topology"],
    }


def _image(pw: Mapping[str, Any], component: str, default: str) -> str:
    """MakeComponentImage: a custom component's image, else the default at pathwaysVersion."""
    for custom in pw["spec"].get("customComponents") or []:
        if custom["componentType"] == component and custom.get("image"):
            return str(custom["image"])
    return f"{default}:{pw['spec'].get('pathwaysVersion') or 'latest'}"


def _custom(pw: Mapping[str, Any], component: str, key: str) -> list[Any]:
    """A custom component's customFlags or customEnv."""
    found: list[Any] = []
    for custom in pw["spec"].get("customComponents") or []:
        if custom["componentType"] == component:
            found += copy.deepcopy(custom.get(key) or [])
    return found


def _field(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _annotation(key: str) -> str:
    return f"metadata.annotations['jobset.sigs.k8s.io/{key}']"


def _metrics(pw: Mapping[str, Any]) -> list[str]:
    return (
        ["--enable_metrics_collection=true"]
        if pw["spec"]["controller"].get("enableMetricsCollection")
        else []
    )


def _resource_manager(pw: Mapping[str, Any], init: bool) -> Obj:
    """MakeResourceManagerContainer."""
    spec, worker = pw["spec"], pw["spec"]["workers"][0]
    args = [
        f"--server_port={RM_PORT}",
        f"--gcs_scratch_location={spec.get('pathwaysDir', '')}",
        "--node_type=resource_manager",
        f"--instance_count={worker['numSlices']}",
        f"--instance_type={TPU_VERSION[worker['type']]}:{worker['topology']}",
        *_metrics(pw),
        *_custom(pw, "pathways_server", "customFlags"),
    ]
    env = [
        _field("REPLICATED_JOB_NAME", _annotation("replicatedjob-name")),
        _field("JOBSET_NAME", _annotation("jobset-name")),
        _field("HOST_ADDRESS", COORDINATOR),
        {"name": "TPU_SKIP_MDS_QUERY", "value": "true"},
        *_custom(pw, "pathways_server", "customEnv"),
    ]
    container: Obj = {
        "name": "pathways-rm",
        "image": _image(pw, "pathways_server", RM_AND_WORKER_IMAGE),
        "imagePullPolicy": "Always",
        "args": args,
        "env": env,
        "ports": [{"containerPort": RM_PORT}, {"containerPort": 29002}],
        "resources": {"limits": {"cpu": "8", "memory": "32G"}},
    }
    return {**container, "restartPolicy": "Always"} if init else container


def _proxy(pw: Mapping[str, Any], init: bool) -> Obj:
    """MakeProxyContainer."""
    spec = pw["spec"]
    elastic = int(spec["controller"].get("elasticSlices") or 0)
    args = [
        f"--server_port={PROXY_PORT}",
        f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}",
        f"--gcs_scratch_location={spec.get('pathwaysDir', '')}",
        *_metrics(pw),
        *_custom(pw, "proxy_server", "customFlags"),
        *([f"--num_elastic_slices={elastic}"] if elastic > 0 else []),
    ]
    container: Obj = {
        "name": "pathways-proxy",
        "image": _image(pw, "proxy_server", PROXY_IMAGE),
        "imagePullPolicy": "Always",
        "args": args,
        "env": [_field("PATHWAYS_HEAD", COORDINATOR), *_custom(pw, "proxy_server", "customEnv")],
        "ports": [{"containerPort": PROXY_PORT}],
        "resources": {"limits": {"cpu": "16", "memory": "100G"}},
    }
    return {**container, "restartPolicy": "Always"} if init else container


def _head_job(pw: Mapping[str, Any]) -> Obj:
    """MakePathwaysHeadPodSpec and MakePathwaysHeadReplicatedJob: with the user's Pod, its spec
    with the resource manager and proxy as sidecars (init containers that keep running) and the
    JAX proxy variables on its main container; headless, those two alone. hostNetwork always; on
    TPU nodes beside the workers in colocate_head_with_workers mode, alone on a host of its own
    (exclusive placement per hostname) by default."""
    controller = pw["spec"]["controller"]
    user = controller.get("template")
    if user is not None:
        pod_spec: Obj = copy.deepcopy(user.get("spec") or {})
        pod_spec["initContainers"] = [
            *(pod_spec.get("initContainers") or []),
            _resource_manager(pw, init=True),
            _proxy(pw, init=True),
        ]
        for container in pod_spec.get("containers") or []:
            if container.get("name") == controller.get("mainContainerName", "main"):
                container["env"] = [
                    *(container.get("env") or []),
                    _field("PATHWAYS_HEAD", COORDINATOR),
                    {"name": "JAX_PLATFORMS", "value": "proxy"},
                    {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
                    {
                        "name": "JAX_BACKEND_TARGET",
                        "value": f"grpc://$(PATHWAYS_HEAD):{PROXY_PORT}",
                    },
                ]
    else:
        pod_spec = {"containers": [_resource_manager(pw, init=False), _proxy(pw, init=False)]}
    pod_spec["hostNetwork"] = True
    pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    annotations = annotations_of(pw)
    if controller["deploymentMode"] == "colocate_head_with_workers":
        pod_spec["nodeSelector"] = _tpu_node_selector(pw)
    else:
        annotations[EXCLUSIVE] = "kubernetes.io/hostname"
    return {
        "name": HEAD,
        "replicas": 1,
        "template": {
            "metadata": {"annotations": annotations} if annotations else {},
            "spec": {
                "backoffLimit": 0,
                "completions": 1,
                "parallelism": 1,
                "template": {
                    "metadata": {"annotations": dict(annotations)} if annotations else {},
                    "spec": pod_spec,
                },
            },
        },
    }


def _worker_job(pw: Mapping[str, Any]) -> Obj:
    """MakeWorkerJob: one Job per slice (`numSlices` replicas) of one Pod per host, backoffLimit
    4 x hosts (hosts x maxSliceRestarts with elastic slices); the worker on the slice's
    selectors with its chips, hostNetwork, /tmp from the host, and the MEGASCALE_* variables
    from JobSet's labels; exclusive placement per node pool."""
    spec, worker = pw["spec"], pw["spec"]["workers"][0]
    hosts, chips = slice_hosts(worker["type"], worker["topology"])
    restarts = int(worker.get("maxSliceRestarts") or 0)
    elastic = int(spec["controller"].get("elasticSlices") or 0) > 0 and restarts > 0
    args = [
        f"--server_port={WORKER_PORT}",
        f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}",
        f"--gcs_scratch_location={spec.get('pathwaysDir', '')}",
        *_metrics(pw),
        *_custom(pw, "worker", "customFlags"),
    ]
    env = [
        {"name": "TPU_MIN_LOG_LEVEL", "value": "0"},
        {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "0"},
        {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
        {"name": "MEGASCALE_GRPC_ENABLE_XOR_TRACER", "value": "false"},
        _field(
            "MEGASCALE_NUM_SLICES", "metadata.labels['jobset.sigs.k8s.io/replicatedjob-replicas']"
        ),
        _field("JOBSET_NAME", _annotation("jobset-name")),
        _field("REPLICATED_JOB_NAME", _annotation("replicatedjob-name")),
        _field("MEGASCALE_SLICE_ID", "metadata.labels['jobset.sigs.k8s.io/job-index']"),
        _field("PATHWAYS_HEAD", COORDINATOR),
        _field("MEGASCALE_COORDINATOR_ADDRESS", COORDINATOR),
        *_custom(pw, "worker", "customEnv"),
    ]
    pod_spec: Obj = {
        "containers": [
            {
                "name": "pathways-worker",
                "image": _image(pw, "worker", RM_AND_WORKER_IMAGE),
                "imagePullPolicy": "Always",
                "args": args,
                "env": env,
                "ports": [{"containerPort": p} for p in (WORKER_PORT, 29006, 8471, 8080)],
                "volumeMounts": [{"name": "shared-tmp", "mountPath": "/tmp"}],
                "resources": {"limits": {"google.com/tpu": str(chips)}},
            }
        ],
        "nodeSelector": _tpu_node_selector(pw),
        "volumes": [
            {
                "name": "shared-tmp",
                "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"},
            }
        ],
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
    }
    for key in ("terminationGracePeriodSeconds", "priorityClassName"):
        if worker.get(key):
            pod_spec[key] = worker[key]
    sidecar = [
        c
        for c in spec.get("customComponents") or []
        if c["componentType"] == "colocated_python_sidecar" and c.get("image")
    ]
    if sidecar:
        pod_spec["initContainers"] = [
            {
                "name": "colocated-python-sidecar",
                "image": sidecar[0]["image"],
                "imagePullPolicy": "Always",
                "env": [{"name": "GRPC_SERVER_ADDRESS", "value": "'0.0.0.0:50051'"}],
                "ports": [{"containerPort": 50051}],
                "volumeMounts": [{"name": "shared-tmp", "mountPath": "/tmp"}],
                "restartPolicy": "Always",
            }
        ]
    if spec["controller"]["deploymentMode"] == "colocate_head_with_workers":
        pod_spec["affinity"] = _colocated_affinity(pw)
    return {
        "name": "worker",
        "replicas": int(worker["numSlices"]),
        "template": {
            "spec": {
                "backoffLimit": hosts * (restarts if elastic else 4),
                "completions": hosts,
                "parallelism": hosts,
                "template": {
                    "metadata": {"annotations": {EXCLUSIVE: "cloud.google.com/gke-nodepool"}},
                    "spec": pod_spec,
                },
            }
        },
    }


def _colocated_affinity(pw: Mapping[str, Any]) -> Obj:
    """MakePodAffinityRules: the workers on the head's node pool, no other JobSet's Jobs there."""
    name = "jobset.sigs.k8s.io/jobset-name"
    pool = "cloud.google.com/gke-nodepool"
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchExpressions": [
                            {"key": name, "operator": "In", "values": [name_of(pw)]}
                        ]
                    },
                    "topologyKey": pool,
                }
            ]
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchExpressions": [
                            {"key": name, "operator": "NotIn", "values": [name_of(pw)]},
                            {"key": "job-name", "operator": "Exists"},
                        ]
                    },
                    "topologyKey": pool,
                }
            ]
        },
    }
