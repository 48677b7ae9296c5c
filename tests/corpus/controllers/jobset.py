"""JobSet (read at JOBSET, see common.py): its defaulting webhook and the Jobs its controller
creates."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tests.corpus.controllers.common import (
    Obj,
    annotations_of,
    controller_ref,
    labels_of,
    listed,
    name_of,
    namespace_of,
    sha1,
    stamp,
    uid_of,
)


def default_jobset(js: Obj) -> None:
    """JobSet's webhook Default (JOBSET pkg/webhooks/jobset_webhook.go) and CRD defaults
    (api/jobset/v1alpha2/jobset_types.go: replicas 1, groupName "default")."""
    spec = js["spec"]
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rjob in spec.get("replicatedJobs") or []:
        rjob.setdefault("replicas", 1)
        rjob.setdefault("groupName", "default")
        job_spec = rjob["template"].setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        if not pod_spec.get("restartPolicy"):
            pod_spec["restartPolicy"] = "OnFailure"
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)


def jobset_jobs(js: Mapping[str, Any]) -> list[Obj]:
    """JOBSET pkg/controllers/jobset_controller.go constructJob and labelAndAnnotateObject: Jobs
    `<js>-<rjob>-<i>` (pkg/util/placement/placement.go GenJobName), labels and annotations on the
    Job and its Pod template, subdomain = JobSet name (or spec.network.subdomain) when DNS
    hostnames are on, suspended when the JobSet is."""
    spec = js["spec"]
    rjobs = spec.get("replicatedJobs") or []
    network = spec.get("network") or {}
    subdomain = network.get("subdomain") or name_of(js)
    jobs = []
    global_index = 0
    for rjob in rjobs:
        group = rjob.get("groupName", "default")
        group_total = sum(int(r.get("replicas", 1)) for r in rjobs if r.get("groupName") == group)
        group_before = 0
        for other in rjobs:
            if other is rjob:
                break
            if other.get("groupName") == group:
                group_before += int(other.get("replicas", 1))
        for index in range(int(rjob.get("replicas", 1))):
            job_name = f"{name_of(js)}-{rjob['name']}-{index}"
            marks = {
                "jobset.sigs.k8s.io/jobset-name": name_of(js),
                "jobset.sigs.k8s.io/jobset-uid": uid_of(js),
                "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                "jobset.sigs.k8s.io/restart-attempt": "0",
                "jobset.sigs.k8s.io/replicatedjob-replicas": str(rjob.get("replicas", 1)),
                "jobset.sigs.k8s.io/global-replicas": str(
                    sum(int(r.get("replicas", 1)) for r in rjobs)
                ),
                "jobset.sigs.k8s.io/job-index": str(index),
                "jobset.sigs.k8s.io/job-key": sha1(f"{namespace_of(js)}/{job_name}"),
                "jobset.sigs.k8s.io/job-global-index": str(global_index + index),
                "jobset.sigs.k8s.io/group-name": group,
                "jobset.sigs.k8s.io/group-replicas": str(group_total),
                "jobset.sigs.k8s.io/job-group-index": str(group_before + index),
            }
            coordinator = spec.get("coordinator")
            if coordinator:
                marks["jobset.sigs.k8s.io/coordinator"] = (
                    f"{name_of(js)}-{coordinator['replicatedJob']}-"
                    f"{coordinator.get('jobIndex', 0)}-{coordinator.get('podIndex', 0)}.{subdomain}"
                )
            job_annotations = {**annotations_of(rjob["template"]), **marks}
            for source in (annotations_of(js), annotations_of(rjob["template"])):
                for key in (
                    "alpha.jobset.sigs.k8s.io/exclusive-topology",
                    "alpha.jobset.sigs.k8s.io/node-selector",
                ):
                    if key in source:
                        job_annotations[key] = source[key]
            job: Obj = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": job_name,
                    "namespace": namespace_of(js),
                    "labels": {**labels_of(rjob["template"]), **marks},
                    "annotations": job_annotations,
                    "ownerReferences": [controller_ref(js)],
                },
                "spec": copy.deepcopy(rjob["template"]["spec"]),
            }
            template = job["spec"]["template"]
            stamp(template, marks, job_annotations)
            if network.get("enableDNSHostnames"):
                template["spec"]["subdomain"] = subdomain
            if "alpha.jobset.sigs.k8s.io/node-selector" in job_annotations:
                selector = template["spec"].setdefault("nodeSelector", {})
                selector["alpha.jobset.sigs.k8s.io/namespaced-job"] = (
                    f"{namespace_of(js)}_{job_name}"
                )
                listed(template["spec"], "tolerations").append(
                    {
                        "key": "alpha.jobset.sigs.k8s.io/no-schedule",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                    }
                )
            job["spec"]["suspend"] = bool(spec.get("suspend", False))
            jobs.append(job)
        global_index += int(rjob.get("replicas", 1))
    return jobs
