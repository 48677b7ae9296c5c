"""A Kubeflow Trainer TrainJob (`trainer.kubeflow.org/v1alpha1`): its runtime's JobSet, with
`spec.trainer.numNodes` Pods of the trainer Job, each with `spec.trainer.resourcesPerNode`.

The Trainer controller (kubeflow/trainer pkg/runtime/framework/plugins/jobset, v2.0-v2.3) names
the JobSet after the TrainJob and sets the trainer replicatedJob's `parallelism` and
`completions` to numNodes (else the runtime's `spec.mlPolicy.numNodes`), merges resourcesPerNode
into its `node` container, and applies the TrainJob's node selectors (`podSpecOverrides` in
v2.0, `podTemplateOverrides` in v2.1, `runtimePatches` from v2.2). The TPU type and slice are in
the runtime or in those overrides; the runtime comes from the cluster (a ClusterTrainingRuntime,
or a TrainingRuntime of the namespace). The host count of a multi-host slice is decided here, at
`spec.trainer.numNodes`: the JobSet the controller makes is a child, checked for its pod spec
only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from webhook.catalog.tpu import TPU_RESOURCE, Catalog
from webhook.policy.bounds import MAX_CONTAINERS, MAX_POD_TEMPLATES
from webhook.policy.cluster import ClusterView, Runtime
from webhook.policy.exemptions import Exemptions
from webhook.policy.paths import FieldPath
from webhook.policy.podspec import read_tpu_spec, slice_shape
from webhook.policy.templates import Obj, Sites
from webhook.policy.violations import Violation, invalid, required

NUM_NODES = ("spec", "trainer", "numNodes")
RESOURCES = ("spec", "trainer", "resourcesPerNode")
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
NODE = "node"  # the trainer replicatedJob's and container's name in Trainer's runtimes


def check(
    obj: Obj, sites: Sites, catalog: Catalog, exemptions: Exemptions, cluster: ClusterView
) -> list[Violation]:
    """The trainer Job's host count (numNodes) against its TPU slice."""
    spec = obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    trainer = spec.get("trainer")
    trainer = trainer if isinstance(trainer, dict) else {}
    runtime = _runtime(obj, spec, cluster)
    template, rjob = _trainer_template(runtime)
    pod = _pod_spec(template, spec, trainer, rjob)
    tpu = read_tpu_spec(pod, FieldPath.root(*RESOURCES), "")
    if tpu is None or not tpu.chips:
        return []
    shape = slice_shape(tpu, catalog)
    if shape is None or not shape.multi_host:
        return []
    written = trainer.get("numNodes")
    nodes = written if written is not None else (runtime.num_nodes if runtime else None)
    if nodes == shape.hosts and not isinstance(nodes, bool):
        return []
    detail = (
        f"{shape.accelerator} {shape.describe()}, one Pod per host; set numNodes to {shape.hosts}"
    )
    if written is None:
        given = "its runtime's mlPolicy.numNodes is " + (
            str(nodes) if nodes is not None else "unset"
        )
        return [
            required("tpu.multihost-parallelism", FieldPath.root(*NUM_NODES), f"{detail} ({given})")
        ]
    return [invalid("tpu.multihost-parallelism", FieldPath.root(*NUM_NODES), written, detail)]


def _runtime(
    obj: Mapping[str, Any], spec: Mapping[str, Any], cluster: ClusterView
) -> Runtime | None:
    ref = spec.get("runtimeRef")
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
        return None
    kind = ref.get("kind") or "ClusterTrainingRuntime"
    metadata = obj.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    return cluster.runtime(
        str(kind), namespace if isinstance(namespace, str) and namespace else "default", ref["name"]
    )


def _trainer_template(runtime: Runtime | None) -> tuple[Mapping[str, Any], str]:
    """The trainer replicatedJob's pod spec in the runtime, and its name; ({}, node) without."""
    jobs = runtime.jobset.get("replicatedJobs") if runtime else None
    chosen: Mapping[str, Any] | None = None
    for job in jobs[:MAX_POD_TEMPLATES] if isinstance(jobs, list) else ():
        if not isinstance(job, dict):
            continue
        template = job.get("template")
        labels = _dig(template, ("metadata", "labels"))
        if (isinstance(labels, dict) and labels.get(ANCESTOR_LABEL) == TRAINER_STEP) or (
            chosen is None and job.get("name") == NODE
        ):
            chosen = job
    pod = _dig(chosen, ("template", "spec", "template", "spec")) if chosen else None
    name = chosen.get("name") if chosen else None
    return (pod if isinstance(pod, dict) else {}), (name if isinstance(name, str) else NODE)


def _pod_spec(
    template: Mapping[str, Any],
    spec: Mapping[str, Any],
    trainer: Mapping[str, Any],
    rjob: str,
) -> dict[str, Any]:
    """The trainer Pods' spec as the controller makes it: the runtime's, with the TrainJob's
    node selectors and resourcesPerNode (on the `node` container, or the first)."""
    selector = (
        dict(template.get("nodeSelector") or {})
        if isinstance(template.get("nodeSelector"), dict)
        else {}
    )
    for override in _overrides(spec, rjob):
        selector.update(override)
    containers = [
        dict(c) for c in (template.get("containers") or [])[:MAX_CONTAINERS] if isinstance(c, dict)
    ]
    resources = trainer.get("resourcesPerNode")
    if isinstance(resources, dict):
        target = next((c for c in containers if c.get("name") == NODE), None)
        if target is None:
            target = {"name": NODE}
            containers.insert(0, target)
        merged = dict(target.get("resources") or {})
        for which in ("requests", "limits"):
            given = resources.get(which)
            if isinstance(given, dict) and TPU_RESOURCE in given:
                merged[which] = {**(merged.get(which) or {}), TPU_RESOURCE: given[TPU_RESOURCE]}
        target["resources"] = merged
    return {"nodeSelector": selector, "containers": containers}


def _overrides(spec: Mapping[str, Any], rjob: str) -> Iterator[Mapping[str, Any]]:
    """The node selectors a TrainJob adds to the trainer Job, in every API version's form."""
    for item in _list(spec.get("podSpecOverrides")):  # v2.0
        if _targets(item, rjob) and isinstance(item.get("nodeSelector"), dict):
            yield item["nodeSelector"]
    for item in _list(spec.get("podTemplateOverrides")):  # v2.1
        found = _dig(item, ("spec", "nodeSelector"))
        if _targets(item, rjob) and isinstance(found, dict):
            yield found
    for patch in _list(spec.get("runtimePatches")):  # v2.2+
        jobs = _dig(patch, ("trainingRuntimeSpec", "template", "spec", "replicatedJobs"))
        for job in _list(jobs):
            found = _dig(job, ("template", "spec", "template", "spec", "nodeSelector"))
            if job.get("name") == rjob and isinstance(found, dict):
                yield found


def _targets(item: Mapping[str, Any], rjob: str) -> bool:
    targets = item.get("targetJobs")
    return any(isinstance(t, dict) and t.get("name") == rjob for t in _list(targets))


def _list(value: object) -> list[Any]:
    return (
        [v for v in value[:MAX_POD_TEMPLATES] if isinstance(v, dict)]
        if isinstance(value, list)
        else []
    )


def _dig(node: Any, path: tuple[str, ...]) -> Any:
    for step in path:
        node = node.get(step) if isinstance(node, dict) else None
    return node
