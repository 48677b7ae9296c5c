"""The audit's pure parts: a stored object's verdict, the table, and the PolicyReports (bodies
and the writes that make the stored ones right)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from webhook.admission.dispatch import Policy
from webhook.audit import report
from webhook.audit.report import Action
from webhook.audit.table import table
from webhook.audit.verdicts import Audited, Finding, audit
from webhook.catalog import load_catalog
from webhook.policy.stored import CODE as WORKER_ENV_MISSING

POLICY = Policy(load_catalog(None))
SELECTOR = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
    "cloud.google.com/gke-tpu-topology": "4x4",
}
WORKER_ENV = [
    {
        "name": "TPU_WORKER_ID",
        "valueFrom": {
            "fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            }
        },
    },
    {"name": "TPU_WORKER_HOSTNAMES", "value": ",".join(f"train-{i}.train" for i in range(4))},
]


def job(
    parallelism: int = 4, env: list[dict[str, Any]] | None = None, **meta: Any
) -> dict[str, Any]:
    """A stored Indexed Job on tpu-v6e-slice 4x4 (4 hosts of 4 chips)."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "trainer",
        "resources": {"limits": {"google.com/tpu": "4"}, "requests": {"google.com/tpu": "4"}},
        "ports": [{"containerPort": 8471}, {"containerPort": 8431}],
    }
    if env is not None:
        container["env"] = env
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team", "uid": "u-1", **meta},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "subdomain": "train",
                    "restartPolicy": "Never",
                    "nodeSelector": SELECTOR,
                    "containers": [container],
                }
            },
        },
    }


def test_a_stored_job_as_tpu_webhook_stores_it_is_admitted() -> None:
    audited = audit(job(env=WORKER_ENV), POLICY)
    assert audited == Audited(
        "batch/v1",
        "Job",
        "team",
        "train",
        "u-1",
        "admitted",
        (),
        ("tpu-v6e-slice 4x4 = 16 chips at 4 per host needs 4 hosts",),
    )


def test_a_stored_job_that_forms_no_slice_is_denied_with_the_webhooks_message() -> None:
    audited = audit(job(parallelism=2, env=WORKER_ENV), POLICY)
    assert audited is not None
    assert (audited.verdict, audited.codes) == ("denied", ["tpu.multihost-parallelism"])
    assert audited.denials[0].message == (
        "spec.parallelism: Invalid value: 2: 4x4 = 16 chips at 4 per host needs 4 hosts; set "
        "spec.parallelism and spec.completions to 4"
    )


def test_missing_worker_variables_are_a_warning_not_a_patch() -> None:
    audited = audit(job(), POLICY)
    assert audited is not None
    assert (audited.verdict, audited.findings) == (
        "warned",
        (
            Finding(
                WORKER_ENV_MISSING,
                "spec.template.spec.containers[0].env",
                "spec.template.spec.containers[0].env: Required value: TPU_WORKER_ID, "
                "TPU_WORKER_HOSTNAMES not set (JAX finds its place in the slice from them); "
                "tpu-webhook adds them at create, so this object was created without them (GKE's "
                "own injection may still set them on the Pods it starts): set them, or create it "
                "again with tpu-webhook on",
                denial=False,
            ),
        ),
    )


def test_ports_tpu_webhook_would_add_are_no_finding() -> None:
    stored = job(env=WORKER_ENV)
    del stored["spec"]["template"]["spec"]["containers"][0]["ports"]
    audited = audit(stored, POLICY)
    assert audited is not None
    assert audited.verdict == "admitted"


def test_an_opted_out_workload_is_exempt_and_other_objects_are_not_tpu_workloads() -> None:
    opted_out = audit(job(parallelism=2, labels={"tpu-webhook.io/ignore": "true"}), POLICY)
    plain = job()
    plain["spec"]["template"]["spec"]["nodeSelector"] = {}
    plain["spec"]["template"]["spec"]["containers"][0]["resources"] = {}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "train"}}
    assert opted_out is not None
    assert (opted_out.verdict, opted_out.findings) == ("exempt", ())
    assert (audit(plain, POLICY), audit(service, POLICY)) == (None, None)


# ---------------------------------------------------------------- table


def audited(name: str, verdict: str, *findings: Finding, namespace: str = "team") -> Audited:
    return Audited("batch/v1", "Job", namespace, name, f"uid-{name}", verdict, findings)  # type: ignore[arg-type]


FAIL = Finding("tpu.multihost-parallelism", "spec.parallelism", "spec.parallelism: bad", True)
WARN = Finding(WORKER_ENV_MISSING, "spec.template.spec.containers[0].env", "env: missing", False)


def test_the_table_is_printed_as_kubectl_prints_a_listing() -> None:
    rows = [audited("broken", "denied", FAIL, WARN), audited("ok", "admitted")]
    assert table(rows, all_namespaces=True) == (
        "NAMESPACE   KIND   NAME     VERDICT    FINDINGS\n"
        "team        Job    broken   denied     tpu.multihost-parallelism,tpu.worker-env-missing\n"
        "team        Job    ok       admitted   <none>\n"
    )
    assert table(rows[1:], all_namespaces=False, wide=True) == (
        "KIND   NAME   VERDICT    FINDINGS   MESSAGE\nJob    ok     admitted   <none>\n"
    )


# ---------------------------------------------------------------- reports


def test_a_namespace_report_has_a_result_per_finding_and_a_pass_per_clean_workload() -> None:
    body = report.reports([audited("broken", "denied", FAIL, WARN), audited("ok", "admitted")], 100)
    assert list(body) == ["team"]
    stored = body["team"]
    assert stored["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
    assert stored["kind"] == "PolicyReport"
    assert stored["metadata"] == {
        "name": "tpu-webhook",
        "namespace": "team",
        "labels": {"app.kubernetes.io/managed-by": "tpu-webhook"},
    }
    assert stored["summary"] == {"pass": 1, "fail": 1, "warn": 1, "error": 0, "skip": 0}
    first = stored["results"][0]
    assert first == {
        "policy": "tpu-webhook",
        "rule": "tpu.multihost-parallelism",
        "result": "fail",
        "severity": "high",
        "message": "spec.parallelism: bad",
        "properties": {"field": "spec.parallelism"},
        "resources": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "broken",
                "namespace": "team",
                "uid": "uid-broken",
            }
        ],
        "source": "tpu-webhook",
        "category": "Cloud TPU",
        "scored": True,
        "timestamp": {"seconds": 100, "nanos": 0},
    }
    assert [(r["rule"], r["result"]) for r in stored["results"]] == [
        ("tpu.multihost-parallelism", "fail"),
        (WORKER_ENV_MISSING, "warn"),
        ("validate", "pass"),
    ]


def test_cluster_scoped_objects_go_to_the_cluster_report_and_exempt_ones_are_skipped() -> None:
    body = report.reports([audited("x", "exempt", namespace="")], 5)
    (cluster,) = body.values()
    assert (cluster["kind"], "namespace" in cluster["metadata"]) == ("ClusterPolicyReport", False)
    assert cluster["summary"]["skip"] == 1
    assert cluster["results"][0]["resources"][0].get("namespace") is None


def test_a_report_keeps_at_most_max_results_fails_first_and_counts_them_all() -> None:
    many = [audited(f"ok-{i}", "admitted") for i in range(report.MAX_RESULTS)]
    body = report.report("team", [*many, audited("broken", "denied", FAIL)], 1)
    assert len(body["results"]) == report.MAX_RESULTS
    assert body["results"][0]["result"] == "fail"
    assert body["summary"]["pass"] == report.MAX_RESULTS


def stored(body: dict[str, Any], version: str = "7") -> dict[str, Any]:
    """A report as the API server returns it: with its resourceVersion and a uid."""
    copied = copy.deepcopy(body)
    copied["metadata"] |= {"resourceVersion": version, "uid": "r-1"}
    return copied


API = "/apis/wgpolicyk8s.io/v1alpha2"


@pytest.mark.parametrize(
    ("wanted", "existing", "writes"),
    [
        pytest.param(
            {"team"}, set(), [("create", f"{API}/namespaces/team/policyreports")], id="new"
        ),
        pytest.param({"team"}, {"team"}, [], id="unchanged: left alone"),
        pytest.param(
            set(),
            {"team"},
            [("delete", f"{API}/namespaces/team/policyreports/tpu-webhook")],
            id="no TPU workloads left",
        ),
        pytest.param({""}, set(), [("create", f"{API}/clusterpolicyreports")], id="cluster"),
    ],
)
def test_the_plan_creates_leaves_and_deletes(
    wanted: set[str], existing: set[str], writes: list[tuple[str, str]]
) -> None:
    body = {
        ns: report.report(ns, [audited("ok", "admitted", namespace=ns)], 1)
        for ns in wanted | existing
    }
    actions = report.plan({ns: body[ns] for ns in wanted}, [stored(body[ns]) for ns in existing])
    assert [(a.write, a.path) for a in actions] == writes


def test_a_changed_report_is_replaced_with_the_version_read_and_first_seen_times_kept() -> None:
    before = report.report("team", [audited("ok", "admitted")], 100)
    after = report.report("team", [audited("ok", "admitted"), audited("new", "denied", FAIL)], 200)
    (action,) = report.plan({"team": after}, [stored(before, version="42")])
    assert isinstance(action, Action)
    assert (action.write, action.path) == (
        "replace",
        "/apis/wgpolicyk8s.io/v1alpha2/namespaces/team/policyreports/tpu-webhook",
    )
    assert action.body is not None
    assert action.body["metadata"]["resourceVersion"] == "42"
    times = {r["resources"][0]["name"]: r["timestamp"]["seconds"] for r in action.body["results"]}
    assert times == {"ok": 100, "new": 200}


def test_reports_of_other_names_are_not_ours_to_touch() -> None:
    other = stored(report.report("team", [], 1))
    other["metadata"]["name"] = "someone-else"
    assert report.plan({}, [other]) == []


def test_a_missing_subdomain_is_a_finding_with_the_name_it_would_get() -> None:
    stored = job()
    del stored["spec"]["template"]["spec"]["subdomain"]
    audited = audit(stored, POLICY)
    assert audited is not None
    assert [(f.code, f.field) for f in audited.findings] == [
        (WORKER_ENV_MISSING, "spec.template.spec.subdomain"),
        (WORKER_ENV_MISSING, "spec.template.spec.containers[0].env"),
    ]
    assert audited.findings[0].message == (
        "spec.template.spec.subdomain: Required value: the Pods' hostnames need a subdomain "
        "(train) and a headless Service of that name; tpu-webhook sets it at create, so this "
        "object was created without it: set it"
    )
