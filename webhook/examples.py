"""Ready-to-create manifests for a TPU slice shape (`tpu-webhook explain`): an Indexed Job with its
headless Service, or a JobSet (which makes its own headless Service)."""

from __future__ import annotations

from typing import Any

from webhook.catalog.tpu import ACCELERATOR_LABEL, TOPOLOGY_LABEL, TPU_RESOURCE, SliceShape

KINDS = ("job", "jobset")


def example_manifests(shape: SliceShape, kind: str = "job", name: str = "") -> list[dict[str, Any]]:
    if kind == "jobset":
        return [jobset(shape, name or "tpu-jobset")]
    return job_and_service(shape, name or "tpu-job")


def pod_spec(shape: SliceShape) -> dict[str, Any]:
    chips = str(shape.chips_per_host)
    return {
        "restartPolicy": "Never",
        "nodeSelector": {ACCELERATOR_LABEL: shape.accelerator, TOPOLOGY_LABEL: shape.topology},
        "containers": [
            {
                "name": "main",
                "image": "python:3.11",
                "command": ["python", "-c", "import jax; print(jax.device_count())"],
                "resources": {"requests": {TPU_RESOURCE: chips}, "limits": {TPU_RESOURCE: chips}},
            }
        ],
    }


def job_spec(shape: SliceShape) -> dict[str, Any]:
    """One slice: an Indexed Job of one Pod per host, not retried Pod by Pod."""
    return {
        "backoffLimit": 0,
        "completions": shape.hosts,
        "parallelism": shape.hosts,
        "completionMode": "Indexed",
        "template": {"spec": pod_spec(shape)},
    }


def job_and_service(shape: SliceShape, name: str) -> list[dict[str, Any]]:
    """A headless Service and an Indexed Job for the shape, ready for `kubectl create -f`."""
    spec = job_spec(shape)
    spec["template"]["spec"] = {"subdomain": name, **spec["template"]["spec"]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"clusterIP": "None", "selector": {"job-name": name}},
    }
    return [service, job]


def jobset(shape: SliceShape, name: str, slices: int = 1) -> dict[str, Any]:
    """A JobSet of `slices` Jobs, one per slice; JobSet makes the headless Service and restarts
    the whole JobSet when a host fails (failurePolicy)."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": {"maxRestarts": 3},
            "replicatedJobs": [
                {"name": "slice", "replicas": slices, "template": {"spec": job_spec(shape)}}
            ],
        },
    }
