"""The full text of every rule's message, for one representative input each.

The API server prints `... denied the request: <message>`, so these texts are the user-facing
contract: `<field>: <Type>: <value>: <detail>` with the real numbers and what to change.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit import apply, workload_of
from webhook.catalog import load_catalog
from webhook.policy import decide
from webhook.policy.violations import aggregate, render_value

CATALOG = load_catalog()
ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY = "cloud.google.com/gke-tpu-topology"
KNOWN = CATALOG.names()  # the catalog's accelerators, as messages list them


def pod(accelerator: str | None, topology: str | None, **resources: Any) -> dict[str, Any]:
    selector = {k: v for k, v in ((ACCELERATOR, accelerator), (TOPOLOGY, topology)) if v}
    container = {"name": "main", "image": "trainer", "resources": resources}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0"},
        "spec": {"nodeSelector": selector, "containers": [container]},
    }


def chips(count: object, **more: object) -> dict[str, Any]:
    return {
        "requests": {"google.com/tpu": count, **more},
        "limits": {"google.com/tpu": count, **more},
    }


def v4_job(name: str = "train", **spec: Any) -> dict[str, Any]:
    """A correct 4-host v4 2x2x4 Indexed Job, changed by `spec` (None removes a field)."""
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "completionMode": "Indexed",
            "parallelism": 4,
            "completions": 4,
            "template": {
                "spec": {
                    "subdomain": "train",
                    "restartPolicy": "Never",
                    "nodeSelector": {ACCELERATOR: "tpu-v4-podslice", TOPOLOGY: "2x2x4"},
                    "containers": [{"name": "main", "image": "trainer", "resources": chips(4)}],
                }
            },
        },
    }
    job["spec"] = {k: v for k, v in {**job["spec"], **spec}.items() if v is not None}
    return job


def messages(obj: dict[str, Any], code: str) -> list[str]:
    verdict = decide.validate(obj, workload_of(obj), CATALOG)
    return [v.message for v in (*verdict.denials, *verdict.warnings) if v.code == code]


def test_accelerator_missing_names_the_chips_and_the_known_types() -> None:
    assert messages(pod(None, "2x4", **chips(8)), "tpu.accelerator-missing") == [
        "spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: Required value: "
        f"spec.containers[0] requests 8 google.com/tpu chips; set the TPU type to run them on, "
        f"one of {KNOWN}"
    ]


def test_topology_missing_gives_an_example_topology() -> None:
    assert messages(pod("tpu-v4-podslice", None, **chips(4)), "tpu.topology-missing") == [
        "spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Required value: set it when "
        'cloud.google.com/gke-tpu-accelerator is set (e.g. "2x2x2")'
    ]


def test_accelerator_unknown_suggests_the_label_a_typo_meant() -> None:
    assert messages(pod("tpu-v5p-slise", "2x2x1", **chips(4)), "tpu.accelerator-unknown") == [
        "spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: Unsupported value: "
        '"tpu-v5p-slise": unknown; did you mean "tpu-v5p-slice"?'
    ]


def test_accelerator_unknown_says_a_machine_type_is_not_an_accelerator() -> None:
    obj = pod("tpu7x-standard-4t", "2x2x1", **chips(4))
    assert messages(obj, "tpu.accelerator-unknown") == [
        "spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: Unsupported value: "
        '"tpu7x-standard-4t": a machine type, not an accelerator; did you mean "tpu7x"?'
    ]


def test_accelerator_unknown_warning_says_what_goes_unchecked() -> None:
    assert messages(pod("tpu7", "2x2x1", **chips(4)), "tpu.accelerator-unknown") == [
        'spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: Unsupported value: "tpu7": '
        f"not in this webhook's TPU catalog ({KNOWN}); its topologies and chip counts are not "
        "checked, add it to the catalog (--catalog) if it is a new TPU type"
    ]


def test_topology_invalid_lists_what_the_accelerator_offers() -> None:
    obj = pod("tpu-v5-lite-podslice", "2x3", **chips(6))
    assert messages(obj, "tpu.topology-invalid") == [
        'spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Unsupported value: "2x3": '
        "tpu-v5-lite-podslice offers 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"
    ]


def test_topology_invalid_states_the_dimension_order_the_rule_requires() -> None:
    # 8x4x4 is rejected because ruled topologies are written A <= B <= C; the message must say so,
    # or "every dimension a multiple of 4" reads as if 8x4x4 were offered.
    obj = pod("tpu-v5p-slice", "8x4x4", **chips(4))
    assert messages(obj, "tpu.topology-invalid") == [
        'spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Unsupported value: "8x4x4": '
        "tpu-v5p-slice offers 2x2x1, 2x2x2, 2x2x4, 2x4x4, 16x20x28, or any AxBxC with "
        "A <= B <= C and every dimension a multiple of 4 up to 8960 chips"
    ]


def test_chips_per_host_names_the_counts_the_slice_runs() -> None:
    obj = pod("tpu-v5-lite-podslice", "2x4", limits={"google.com/tpu": 3})
    assert messages(obj, "tpu.chips-per-host") == [
        "spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 3: "
        "tpu-v5-lite-podslice 2x4 runs 4 or 8 chips per host; set requests and limits to 4 or 8"
    ]


def test_requests_limits_differ_names_the_request() -> None:
    obj = pod(
        "tpu-v5-lite-podslice",
        "2x4",
        requests={"google.com/tpu": 8},
        limits={"google.com/tpu": 4},
    )
    assert messages(obj, "tpu.requests-limits-differ") == [
        "spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 4: must equal "
        "requests[google.com/tpu] (8); a Pod runs all chips of its host, set both to the same count"
    ]


def test_multiple_tpu_containers_names_the_first_container() -> None:
    obj = pod("tpu-v5-lite-podslice", "2x2", **chips(4))
    second = {**obj["spec"]["containers"][0], "name": "side"}
    obj["spec"]["containers"].append(copy.deepcopy(second))
    assert messages(obj, "tpu.multiple-tpu-containers") == [
        "spec.containers[1].resources.limits[google.com/tpu]: Forbidden: only one container may "
        "request google.com/tpu on tpu-v5-lite-podslice (spec.containers[0] requests 4); move the "
        "chips to one container"
    ]


def test_resources_exceed_node_names_the_machine_and_its_capacity() -> None:
    obj = pod("tpu-v5p-slice", "2x2x1", **chips(4, cpu="300"))
    assert messages(obj, "tpu.resources-exceed-node") == [
        'spec.containers[0].resources.requests[cpu]: Invalid value: "300": a ct5p-hightpu-4t VM '
        "(tpu-v5p-slice, 4 chips) has 208 cpu; request at most 208 or the Pod never schedules"
    ]


def test_resources_exceed_node_warning_says_the_figure_is_unconfirmed() -> None:
    obj = pod("tpu-v4-podslice", "2x2x1", **chips(4, memory="500Gi"))
    assert messages(obj, "tpu.resources-exceed-node") == [
        'spec.containers[0].resources.requests[memory]: Invalid value: "500Gi": a ct4p-hightpu-4t '
        "VM (tpu-v4-podslice, 4 chips) has 407G memory (an unconfirmed figure); request at most "
        "407G or the Pod never schedules"
    ]


def test_multihost_not_indexed_says_why_the_index_matters() -> None:
    assert messages(v4_job(completionMode=None), "tpu.multihost-not-indexed") == [
        "spec.completionMode: Required value: tpu-v4-podslice 2x2x4 = 16 chips at 4 per host "
        "needs 4 hosts; set completionMode: Indexed so each Pod knows its TPU_WORKER_ID"
    ]


def test_multihost_parallelism_names_the_host_count() -> None:
    assert messages(v4_job(parallelism=2), "tpu.multihost-parallelism") == [
        "spec.parallelism: Invalid value: 2: 2x2x4 = 16 chips at 4 per host needs 4 hosts; "
        "set spec.parallelism and spec.completions to 4"
    ]


def test_multihost_parallelism_for_missing_completions_claims_no_default() -> None:
    # The API server requires completions for an Indexed Job; it never "defaults to 1".
    assert messages(v4_job(completions=None), "tpu.multihost-parallelism") == [
        "spec.completions: Required value: 2x2x4 = 16 chips at 4 per host needs 4 hosts; "
        "set spec.parallelism and spec.completions to 4"
    ]


def test_multihost_unsupported_workload_says_what_to_run_instead() -> None:
    job = v4_job()
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve"},
        "spec": {"replicas": 4, "template": job["spec"]["template"]},
    }
    assert messages(deployment, "tpu.multihost-unsupported-workload") == [
        "spec.template.spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Forbidden: "
        "tpu-v4-podslice 2x2x4 = 16 chips at 4 per host needs 4 hosts, and a Deployment cannot "
        "form a multi-host slice (its Pods have no TPU_WORKER_ID); run it as an Indexed Job with "
        "parallelism 4, a JobSet, a LeaderWorkerSet or a RayCluster, or pick a single-host "
        "topology"
    ]


def test_worker_env_conflict_gives_the_range_of_worker_ids() -> None:
    job = v4_job()
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "TPU_WORKER_ID", "value": "4"}
    ]
    assert messages(job, "tpu.worker-env-conflict") == [
        'spec.template.spec.containers[0].env[0].value: Invalid value: "4": TPU_WORKER_ID must '
        "be 0..3 for a slice of 4 hosts; remove it to let tpu-webhook set it"
    ]


def test_worker_env_conflict_counts_the_listed_hostnames() -> None:
    job = v4_job()
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "TPU_WORKER_HOSTNAMES", "value": "a,b"}
    ]
    assert messages(job, "tpu.worker-env-conflict") == [
        'spec.template.spec.containers[0].env[0].value: Invalid value: "a,b": TPU_WORKER_HOSTNAMES '
        "lists 2 hosts but 2x2x4 = 16 chips at 4 per host needs 4 hosts; list 4 hostnames or "
        "remove it to let tpu-webhook set it"
    ]


def test_hostname_too_long_gives_the_longest_name_that_fits() -> None:
    name = "a" * 62
    assert messages(v4_job(name), "tpu.hostname-too-long") == [
        f'metadata.name: Invalid value: "{name}": the last host\'s hostname "{name}-3" is 64 '
        "characters and a hostname is at most 63; shorten the name to at most 61 characters"
    ]


def test_quantity_invalid_on_chips_asks_for_a_whole_number() -> None:
    obj = pod("tpu-v5-lite-podslice", "2x2", **chips("four"))
    assert messages(obj, "tpu.quantity-invalid") == [
        'spec.containers[0].resources.limits[google.com/tpu]: Invalid value: "four": '
        "google.com/tpu is a whole number of chips, such as 4"
    ]


def test_quantity_invalid_on_cpu_gives_examples_of_quantities() -> None:
    obj = pod(
        "tpu-v5-lite-podslice",
        "2x2",
        requests={"google.com/tpu": 4, "cpu": "lots"},
        limits={"google.com/tpu": 4},
    )
    assert messages(obj, "tpu.quantity-invalid") == [
        'spec.containers[0].resources.requests[cpu]: Invalid value: "lots": must be a Kubernetes '
        "quantity, such as 10, 500m or 64Gi"
    ]


def test_multihost_retries_explains_why_retries_break_a_slice() -> None:
    assert messages(v4_job(backoffLimit=2), "tpu.multihost-retries") == [
        "spec.backoffLimit: Invalid value: 2: retries restart one Pod at a time, and a restarted "
        "host cannot rejoin its slice of 4; set backoffLimit: 0 and retry the whole Job (or use "
        "JobSet)"
    ]


def test_multihost_retries_for_the_default_does_not_invent_a_value() -> None:
    # Unset, the field has no value to quote: `Invalid value: "6 (the default)"` reads as if the
    # user had written that string. Same form as the other unset fields: Required value + default.
    assert messages(v4_job(backoffLimit=None), "tpu.multihost-retries") == [
        "spec.backoffLimit: Required value: retries restart one Pod at a time, and a restarted "
        "host cannot rejoin its slice of 4; set backoffLimit: 0 and retry the whole Job (or use "
        "JobSet) (it defaults to 6)"
    ]


def test_subdomain_defaulted_says_which_service_to_create() -> None:
    job = v4_job()
    del job["spec"]["template"]["spec"]["subdomain"]
    verdict = decide.mutate(job, workload_of(job), CATALOG, decide.Options())
    assert [v.message for v in verdict.warnings] == [
        'spec.template.spec.subdomain: Defaulted: "train": set to the Job name so the 4 hosts '
        'resolve as train-0.train .. train-3.train; create a headless Service named "train" '
        "(clusterIP: None) selecting the Job's Pods"
    ]


def test_several_violations_are_aggregated_in_brackets_like_kubernetes() -> None:
    job = v4_job(parallelism=2, completions=8)
    stored = apply(job, decide.mutate(job, workload_of(job), CATALOG, decide.Options()).patch)
    verdict = decide.validate(stored, workload_of(stored), CATALOG)
    assert aggregate(verdict.denials) == (
        "[spec.parallelism: Invalid value: 2: 2x2x4 = 16 chips at 4 per host needs 4 hosts; set "
        "spec.parallelism and spec.completions to 4, spec.completions: Invalid value: 8: 2x2x4 = "
        "16 chips at 4 per host needs 4 hosts; set spec.parallelism and spec.completions to 4]"
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (3, "3"),
        (-3, "-3"),
        (0, "0"),
        (True, "true"),  # a bool is no number here
        (None, "null"),
        (10**95 - 1, "9" * 95),
        (-(10**95 - 1), "-" + "9" * 95),  # 96 characters: whole
        (10**95, "1" + "0" * 95),  # 96 characters: whole
        (-(10**95), "-1" + "0" * 94 + "... (97 characters)"),
        (10**96, "1" + "0" * 95 + "... (97 characters)"),
        (10**100, "a number of 101 digits"),
        (2.5, "2.5"),
        ("4", '"4"'),
    ],
)
def test_a_value_is_printed_as_the_api_server_prints_it_and_cut_at_96_characters(
    value: object, shown: str
) -> None:
    assert render_value(value) == shown
