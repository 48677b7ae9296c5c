"""A JobSet's replicatedJobs: each is a Job template run `replicas` times, one slice per Job.

Its Pods are `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>` (sigs.k8s.io/jobset
pkg/util/placement GenJobName; the subdomain is spec.network.subdomain or the JobSet's name, and
only with spec.network.enableDNSHostnames, true by default). The host counts of each Job are the
generic Job rules at `spec.replicatedJobs[i].template.spec`; here what belongs to the JobSet.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from webhook.catalog.owners import (
    JOBSET_JOB_INDEX,
    MEGASCALE_COORDINATOR_ADDRESS,
    MEGASCALE_NUM_SLICES,
    MEGASCALE_SLICE_ID,
)
from webhook.catalog.tpu import MAX_HOSTNAME_LENGTH, Catalog, SliceShape
from webhook.policy.cluster import ClusterView
from webhook.policy.context import skips_checks
from webhook.policy.exemptions import Exemptions
from webhook.policy.paths import FieldPath
from webhook.policy.podspec import TpuSpec, slice_shape
from webhook.policy.slice_rules import env_value_field, literal_env
from webhook.policy.templates import EnvVar, Obj, Site, Sites, dig
from webhook.policy.violations import Violation, invalid, shown

NETWORK = ("spec", "network")
SLICE_ID_REF = f"metadata.annotations['{JOBSET_JOB_INDEX}']"


def replicated_job(obj: Mapping[str, Any], site: Site) -> tuple[str, int]:
    """(name, replicas) of the site's replicatedJob; replicas defaults to 1."""
    item = dig(obj, ("spec", "replicatedJobs", site.indices[0]))
    item = item if isinstance(item, dict) else {}
    name, replicas = item.get("name"), item.get("replicas", 1)
    return (
        name if isinstance(name, str) else "",
        replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1,
    )


def subdomain(obj: Mapping[str, Any]) -> str:
    network = dig(obj, NETWORK)
    given = network.get("subdomain") if isinstance(network, dict) else None
    name = dig(obj, ("metadata", "name"))
    if isinstance(given, str) and given:
        return given
    return name if isinstance(name, str) else ""


def check(
    obj: Obj, sites: Sites, catalog: Catalog, exemptions: Exemptions, cluster: ClusterView
) -> list[Violation]:
    """What the JobSet adds to its replicatedJobs' Job rules: their multislice variables, and
    for multi-host slices DNS hostnames and hostname lengths."""
    found: list[Violation] = []
    for site, tpu in sites:
        if not tpu.chips or skips_checks(tpu.annotations, exemptions):
            continue
        found += check_multislice(obj, site, tpu)
        shape = slice_shape(tpu, catalog)
        if shape is not None and shape.multi_host:
            found += check_slice(obj, site, tpu, shape)
    return found


def check_slice(
    obj: Mapping[str, Any], site: Site, tpu: TpuSpec, shape: SliceShape
) -> list[Violation]:
    """What the JobSet adds to a replicatedJob whose Jobs are multi-host slices."""
    return [
        *_check_dns_hostnames(obj, shape),
        *_check_hostname_length(obj, site, shape),
    ]


def check_multislice(obj: Mapping[str, Any], site: Site, tpu: TpuSpec) -> list[Violation]:
    """User-set MEGASCALE_* variables of a TPU replicatedJob: one slice per Job of it. Its own
    `replicas` count the slices, not the JobSet's global replicas (other replicatedJobs, a
    Pathways head or a tensorboard, are no slices)."""
    rjob, replicas = replicated_job(obj, site)
    named = json.dumps(shown(rjob))
    found = []
    for container in tpu.tpu_containers:
        for position, name, value in literal_env(container):
            field = env_value_field(container, position)
            text = str(value)
            if "$(" in text or not text.strip():
                continue  # built from other variables when the container starts, or unset
            if name == MEGASCALE_NUM_SLICES and text.strip() != str(replicas):
                found.append(
                    invalid(
                        "tpu.multislice-env-conflict",
                        field,
                        value,
                        f"replicatedJob {named} runs {replicas} slices (one per Job, "
                        f"its replicas); set {MEGASCALE_NUM_SLICES} to {replicas} or remove it",
                    )
                )
            elif name == MEGASCALE_SLICE_ID and (replicas > 1 or text.strip() != "0"):
                found.append(
                    invalid(
                        "tpu.multislice-env-conflict",
                        field,
                        value,
                        f"every Job of replicatedJob {named} would claim slice {shown(text)}; "
                        "take it from the Job's index: valueFrom.fieldRef.fieldPath "
                        f"{SLICE_ID_REF}",
                    )
                )
            elif name == MEGASCALE_COORDINATOR_ADDRESS:
                found += _check_coordinator(obj, rjob, field, text)
    return found


def megascale_env(obj: Mapping[str, Any], site: Site) -> list[EnvVar]:
    """The multislice variables of a replicatedJob of several slices (opt-in), from JobSet's
    Downward API annotation for the slice id; none without the JobSet's name."""
    rjob, replicas = replicated_job(obj, site)
    name = dig(obj, ("metadata", "name"))
    if replicas < 2 or not rjob or not isinstance(name, str) or not name:
        return []
    return [
        {"name": MEGASCALE_NUM_SLICES, "value": str(replicas)},
        {"name": MEGASCALE_SLICE_ID, "valueFrom": {"fieldRef": {"fieldPath": SLICE_ID_REF}}},
        {"name": MEGASCALE_COORDINATOR_ADDRESS, "value": coordinator(obj, rjob)},
    ]


def coordinator(obj: Mapping[str, Any], rjob: str) -> str:
    """The first Pod of the first Job of the replicatedJob."""
    name = dig(obj, ("metadata", "name"))
    return f"{name}-{rjob}-0-0.{subdomain(obj)}"


def _check_coordinator(
    obj: Mapping[str, Any], rjob: str, field: FieldPath, text: str
) -> list[Violation]:
    name = dig(obj, ("metadata", "name"))
    if not isinstance(name, str) or not name or not rjob:
        return []
    host = text.strip().split(":", 1)[0]
    expected = coordinator(obj, rjob)
    if host == expected or host.startswith(expected + "."):
        return []
    return [
        invalid(
            "tpu.multislice-env-conflict",
            field,
            text,
            f"the slices of replicatedJob {json.dumps(shown(rjob))} meet at its first Pod, "
            f"{shown(expected)}; set {MEGASCALE_COORDINATOR_ADDRESS} to it (with a port if you "
            "need one) unless the coordinator runs elsewhere",
            advisory=True,
        )
    ]


def _check_dns_hostnames(obj: Mapping[str, Any], shape: SliceShape) -> list[Violation]:
    network = dig(obj, NETWORK)
    enabled = network.get("enableDNSHostnames") if isinstance(network, dict) else None
    if enabled is not False:
        return []
    return [
        invalid(
            "tpu.hostnames-disabled",
            FieldPath.root(*NETWORK, "enableDNSHostnames"),
            False,
            f"{shape.accelerator} {shape.describe()}, which reach each other by hostname; "
            "set it to true (the default)",
        )
    ]


def _check_hostname_length(
    obj: Mapping[str, Any], site: Site, shape: SliceShape
) -> list[Violation]:
    name = dig(obj, ("metadata", "name"))
    rjob, replicas = replicated_job(obj, site)
    if not isinstance(name, str) or not name or not rjob:
        return []
    last = f"{name}-{rjob}-{replicas - 1}-{shape.hosts - 1}"
    if len(last) <= MAX_HOSTNAME_LENGTH:
        return []
    over = len(last) - MAX_HOSTNAME_LENGTH
    return [
        invalid(
            "tpu.hostname-too-long",
            FieldPath.root("metadata", "name"),
            name,
            f"the last host's hostname {json.dumps(shown(last))} is {len(last)} characters and a "
            f"hostname is at most {MAX_HOSTNAME_LENGTH}; shorten the JobSet's or the "
            f"replicatedJob's name by {over} characters",
        )
    ]
