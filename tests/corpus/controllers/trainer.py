"""Kubeflow Trainer (read at TRAINER, see common.py): a TrainJob's CRD defaults and the JobSet its
TrainJob controller builds from the TrainJob and its runtime.

Checked against the real controller: tests/e2e/test_trainer.py runs Trainer v2.3.0 (the same
commit) on the JAX-on-TPU guide's runtimes and compares the JobSet it makes with this one.
Modelled: ClusterTrainingRuntime and TrainingRuntime, runtime patches, numNodes,
resourcesPerNode, the trainer's image, command, args and env, and the JAX runtime's variables
(`mlPolicy.jax`). Not modelled: the Torch, MPI, XGBoost and Flux policies (they write their own
variables and launchers), initializers, pod-group policies (coscheduling, Volcano), the status
server's variables (alpha, off by default).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from tests.corpus.controllers.common import (
    Obj,
    controller_ref,
    group_kind,
    labels_of,
    name_of,
    namespace_of,
)

GROUP = "trainer.kubeflow.org"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
NODE = "node"  # the trainer's replicatedJob and container (pkg/constants Node)
JAX_PORT = 29500  # pkg/constants ContainerTrainerPort
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
#: Lists a strategic merge patch merges by key for the types of a JobSet spec (Kubernetes'
#: `patchMergeKey`s: JobSet's replicatedJobs, a PodSpec's containers, volumes, a container's env,
#: ports, volumeMounts); any other list is replaced.
MERGE_KEYS = {
    "replicatedJobs": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


def default_trainjob(trainjob: Obj) -> None:
    """TRAINER manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml defaults (runtimeRef's
    apiGroup and kind, suspend, managedBy); its webhook only stamps each runtime patch's time."""
    spec = trainjob.setdefault("spec", {})
    ref = spec.setdefault("runtimeRef", {})
    ref.setdefault("apiGroup", GROUP)
    ref.setdefault("kind", "ClusterTrainingRuntime")
    spec.setdefault("suspend", False)
    spec.setdefault("managedBy", "trainer.kubeflow.org/trainjob-controller")


def runtime_of(trainjob: Mapping[str, Any], cluster: Sequence[Mapping[str, Any]]) -> Obj | None:
    """The runtime `spec.runtimeRef` names among the objects in the cluster (a TrainingRuntime in
    the TrainJob's namespace), or None: then the controller creates nothing."""
    ref = trainjob["spec"]["runtimeRef"]
    for obj in cluster:
        if group_kind(obj) != (ref.get("apiGroup", GROUP), ref.get("kind")):
            continue
        same_namespace = obj["kind"] == "ClusterTrainingRuntime" or (
            namespace_of(obj) == namespace_of(trainjob)
        )
        if name_of(obj) == ref["name"] and same_namespace:
            return copy.deepcopy(dict(obj))
    return None


def trainjob_jobset(trainjob: Mapping[str, Any], cluster: Sequence[Mapping[str, Any]]) -> list[Obj]:
    """TRAINER pkg/runtime/core/trainingruntime.go newRuntimeInfo and mergeRuntimePatches (the
    runtime's JobSet template, each runtime patch merged in as a strategic merge patch, the
    patches' template labels and annotations onto the JobSet's), plugins/jax/jax.go
    EnforceMLPolicy, plugins/jobset/jobset.go SyncParallelCount and Build, builder.go Trainer:
    a JobSet named as the TrainJob, owned by it."""
    runtime = runtime_of(trainjob, cluster)
    if runtime is None:
        return []
    template = runtime["spec"]["template"]
    labels = dict(labels_of(template))
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    spec: Obj = copy.deepcopy(template.get("spec") or {})
    for patch in trainjob["spec"].get("runtimePatches") or []:
        patched = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        labels.update(labels_of(patched))
        annotations.update((patched.get("metadata") or {}).get("annotations") or {})
        if patched.get("spec"):
            spec = strategic_merge(spec, patched["spec"])
    policy = runtime["spec"].get("mlPolicy") or {}
    for rjob in spec.get("replicatedJobs") or []:
        _build_replicated_job(rjob, trainjob, policy)
    metadata: Obj = {"name": name_of(trainjob), "namespace": namespace_of(trainjob)}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    metadata["ownerReferences"] = [controller_ref(trainjob)]
    if "suspend" in trainjob["spec"]:
        spec["suspend"] = trainjob["spec"]["suspend"]
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"}
    return [{**jobset, "metadata": metadata, "spec": spec}]


def _build_replicated_job(
    rjob: Obj, trainjob: Mapping[str, Any], policy: Mapping[str, Any]
) -> None:
    """One replicatedJob: its Pod count in parallelism and completions (numNodes for the trainer's,
    else its own parallelism), and for the trainer's Job (1 replica) the trainer container."""
    job_spec = rjob["template"].setdefault("spec", {})
    trainer = trainjob["spec"].get("trainer") or {}
    is_trainer = labels_of(rjob["template"]).get(ANCESTOR) == "trainer"
    count = int(job_spec.get("parallelism", 1))
    if is_trainer:
        count = int(trainer.get("numNodes") or policy.get("numNodes") or 1)
        rjob["replicas"] = 1
    job_spec["parallelism"] = job_spec["completions"] = count
    pod_template = job_spec.setdefault("template", {})
    pod_template.setdefault("metadata", {})  # the builder always writes its (empty) labels
    containers = pod_template.get("spec", {}).get("containers") or []
    for container in containers:  # quantities as Go writes them back: strings
        for section in (container.get("resources") or {}).values():
            section.update({k: str(v) for k, v in section.items()})
    if not is_trainer:
        return
    for container in containers:
        if container.get("name") != NODE:
            continue
        if trainer.get("resourcesPerNode"):
            container["resources"] = _merged_resources(
                container.get("resources") or {}, trainer["resourcesPerNode"]
            )
        if "jax" in policy:
            _upsert(container, "env", _jax_env(trainjob, count))
            _upsert(container, "ports", [{"containerPort": JAX_PORT, "protocol": "TCP"}])
        for key in ("image", "command", "args"):
            if trainer.get(key):
                container[key] = copy.deepcopy(trainer[key])
        _upsert(container, "env", copy.deepcopy(trainer.get("env") or []))


def _jax_env(trainjob: Mapping[str, Any], nodes: int) -> list[Obj]:
    name = name_of(trainjob)
    return [
        {"name": "JAX_NUM_PROCESSES", "value": str(nodes)},
        {"name": "JAX_PROCESS_ID", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
        {"name": "JAX_COORDINATOR_ADDRESS", "value": f"{name}-{NODE}-0-0.{name}:{JAX_PORT}"},
    ]


def _merged_resources(base: Mapping[str, Any], per_node: Mapping[str, Any]) -> Obj:
    """TRAINER pkg/util/trainingruntime MergeResourceRequirements: the TrainJob's quantities
    replace the runtime's of the same name, per section."""
    merged: Obj = {}
    for section in ("limits", "requests"):
        values = {**(base.get(section) or {}), **(per_node.get(section) or {})}
        if values:
            merged[section] = {k: str(v) for k, v in values.items()}
    return merged


def _upsert(container: Obj, key: str, items: list[Obj]) -> None:
    """pkg/apply UpsertEnvVars / UpsertPort: replace the entry of the same key, else append."""
    merge_key = MERGE_KEYS[key]
    current = container.setdefault(key, [])
    for item in items:
        same = [i for i, c in enumerate(current) if c.get(merge_key) == item.get(merge_key)]
        if same:
            current[same[0]] = item
        else:
            current.append(item)


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """k8s.io/apimachinery strategicpatch.StrategicMergePatch on the types of a JobSet spec, for
    what runtime patches hold: maps merge, lists of MERGE_KEYS merge by their key (new entries
    appended), other lists and values are replaced; a null deletes."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = strategic_merge(base.get(k), v, k) if k in base else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        merge_key = MERGE_KEYS[key]
        merged = [copy.deepcopy(item) for item in base]
        for item in patch:
            same = [i for i, b in enumerate(merged) if b.get(merge_key) == item.get(merge_key)]
            if same:
                merged[same[0]] = strategic_merge(merged[same[0]], item)
            else:
                merged.append(copy.deepcopy(item))
        return merged
    return copy.deepcopy(patch)
