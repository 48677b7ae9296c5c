"""The case files under tests/cases, run through the pure decisions.

validate/*.yaml: `decide.validate(object, oldObject)` gives exactly the listed (code, field) denials
and warnings (with `audit: true`, also what a stored object lacks: policy/stored.py).
mutate/*.yaml: the patch of `decide.mutate(object)`, applied, gives `mutated`; it only adds, and
mutating the result again yields nothing.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from tests.unit import apply, expected, findings, overwritten, workload_of
from webhook.catalog import load_catalog
from webhook.catalog.tpu import ACCELERATOR_LABEL, TOPOLOGY_LABEL, SliceShape
from webhook.policy import decide
from webhook.policy.cluster import ClusterView, view_of
from webhook.policy.exemptions import Exemptions
from webhook.policy.offered import Declared, OfferPolicy
from webhook.policy.rules import BY_CODE, Severity
from webhook.policy.stored import missing

CASES = Path(__file__).resolve().parents[1] / "cases"
CATALOG = load_catalog()
OPTIONS = decide.Options()

RULE_CODES = frozenset(BY_CODE)


def load_cases(kind: str) -> list[dict[str, Any]]:
    yaml = YAML(typ="safe", pure=True)
    return [
        {**document, "file": path.name}
        for path in sorted((CASES / kind).glob("*.yaml"))
        for document in yaml.load_all(path.read_text("utf-8"))
    ]


VALIDATE = load_cases("validate")
MUTATE = load_cases("mutate")


def selector(obj: dict[str, Any]) -> dict[str, Any]:
    sites = workload_of(obj).sites(obj)
    spec = sites[0].spec if sites else None  # a claim kind has no pod template
    labels = spec.get("nodeSelector") if isinstance(spec, dict) else None
    return dict(labels or {})


def options_of(case: dict[str, Any]) -> decide.Options:
    """The case's `options` (Options fields; lists as tuples, `exemptions` as Exemptions
    fields), else the defaults."""
    given = {k: tuple(v) if isinstance(v, list) else v for k, v in case.get("options", {}).items()}
    if "exemptions" in given:
        given["exemptions"] = Exemptions(**given["exemptions"])
    return decide.Options(**given)


def cluster_of(case: dict[str, Any]) -> ClusterView:
    """The case's `cluster`: the objects the cluster holds (ComputeClasses, Nodes...), `read`:
    the kinds read in full (default: those of the objects given), and `offerPolicy`: the
    administrator's declared shapes (`declared`: [{accelerator, topologies, namespaces}]) and
    `enforce`."""
    dra = CATALOG.dra
    assert dra is not None
    given = case.get("offerPolicy", {})
    offer = OfferPolicy(
        tuple(
            Declared(
                d["accelerator"], tuple(d.get("topologies", ())), frozenset(d.get("namespaces", ()))
            )
            for d in given.get("declared", ())
        ),
        enforce=given.get("enforce", False),
    )
    return view_of(
        case.get("cluster", ()),
        case.get("read", ()),
        dra.device_classes,
        dra.driver,
        catalog=CATALOG,
        offer=offer,
    )


@pytest.mark.parametrize("case", VALIDATE, ids=[c["name"] for c in VALIDATE])
def test_validate_case(case: dict[str, Any]) -> None:
    obj = case["object"]
    sent = copy.deepcopy(obj)
    verdict = decide.validate(
        obj, workload_of(obj), CATALOG, case.get("oldObject"), options_of(case), cluster_of(case)
    )
    warnings = list(verdict.warnings)
    if case.get("audit"):  # as `tpu-webhook audit` judges a stored object: what it lacks too
        patch = decide.mutate(obj, workload_of(obj), CATALOG, options_of(case), cluster_of(case))
        warnings += missing(patch.patch)
    assert findings(verdict.denials) == expected(case["violations"])
    assert findings(warnings) == expected(case.get("warnings"))
    assert obj == sent


@pytest.mark.parametrize("case", MUTATE, ids=[c["name"] for c in MUTATE])
def test_mutate_case(case: dict[str, Any]) -> None:
    obj = case["object"]
    sent = copy.deepcopy(obj)
    options = options_of(case)
    verdict = decide.mutate(obj, workload_of(obj), CATALOG, options, cluster_of(case))
    result = apply(obj, verdict.patch)
    assert result == case["mutated"]
    assert findings(verdict.warnings) == expected(case.get("warnings"))
    assert [op["op"] for op in verdict.patch if op["op"] != "add"] == []
    assert overwritten(obj, verdict.patch) == []
    assert (
        decide.mutate(result, workload_of(result), CATALOG, options, cluster_of(case)).patch == ()
    )
    assert (result == obj) == (verdict.patch == ())
    assert obj == sent


def test_case_names_are_unique() -> None:
    names = [c["name"] for c in (*VALIDATE, *MUTATE)]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_every_case_document_says_why_in_a_leading_comment() -> None:
    silent = [
        f"{path.name} document {i}"
        for path in sorted(CASES.glob("*/*.yaml"))
        for i, text in enumerate(path.read_text("utf-8").split("\n---\n"))
        if not text.lstrip().startswith("#")
    ]
    assert silent == []


def test_every_case_has_exactly_one_kind_of_expectation() -> None:
    wrong = [c["name"] for c in VALIDATE if "violations" not in c or "mutated" in c]
    wrong += [c["name"] for c in MUTATE if "mutated" not in c or "violations" in c]
    assert wrong == []


def test_every_rule_code_appears_in_some_case() -> None:
    used = {
        entry["code"]
        for case in (*VALIDATE, *MUTATE)
        for entry in (*case.get("violations", ()), *case.get("warnings", ()))
    }
    assert RULE_CODES - used == set()
    assert used - RULE_CODES == set()


def test_every_case_code_has_the_severity_its_rule_declares() -> None:
    """A code a case expects as a denial may deny, one it expects as a warning may warn: the
    registry (and so the README's table) says what each code does."""
    may = {
        "violations": {Severity.DENY, Severity.DENY_OR_WARN},
        "warnings": {Severity.WARN, Severity.DENY_OR_WARN},
    }
    wrong = [
        f"{case['file']}: {case['name']}: {entry['code']} under {key} is {rule.severity.value}"
        for case in (*VALIDATE, *MUTATE)
        for key, allowed in may.items()
        for entry in case.get(key) or ()
        if (rule := BY_CODE[entry["code"]]).severity not in allowed
    ]
    assert wrong == []


def test_every_catalog_accelerator_appears_in_an_allowed_case() -> None:
    allowed = {
        selector(c["object"]).get(ACCELERATOR_LABEL) for c in VALIDATE if c["violations"] == []
    }
    assert set(CATALOG.accelerators) - allowed == set()


def test_every_multi_host_accelerator_appears_in_an_allowed_multi_host_case() -> None:
    covered = {
        name
        for case in VALIDATE
        if case["violations"] == []
        for name, topology in [_slice_of(case["object"])]
        if any(s.multi_host for s in _shapes(name, topology))
    }
    offering = {n for n, a in CATALOG.accelerators.items() if a.multi_host}
    assert offering - covered == set()


def _slice_of(obj: dict[str, Any]) -> tuple[str, str]:
    labels = selector(obj)
    return str(labels.get(ACCELERATOR_LABEL)), str(labels.get(TOPOLOGY_LABEL))


def _shapes(accelerator: str, topology: str) -> tuple[SliceShape, ...]:
    known = CATALOG.accelerator(accelerator)
    return () if known is None else CATALOG.shapes(known, topology)


# Generated from the catalog: every listed shape, run the way it is meant to be run, is admitted.

SHAPES = [
    shape
    for accelerator in CATALOG.accelerators.values()
    for topology in dict.fromkeys((*accelerator.single_host, *accelerator.multi_host))
    for shape in CATALOG.shapes(accelerator, topology)
]


def manifest_for(shape: SliceShape, chips: int) -> dict[str, Any]:
    """A Pod for a single-host shape, an Indexed Job of `hosts` Pods for a multi-host one."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": {ACCELERATOR_LABEL: shape.accelerator, TOPOLOGY_LABEL: shape.topology},
        "containers": [
            {
                "name": "main",
                "image": "trainer",
                "resources": {"requests": {TPU: str(chips)}, "limits": {TPU: str(chips)}},
            }
        ],
    }
    if not shape.multi_host:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t-0"}, "spec": pod_spec}
    spec = {
        "backoffLimit": 0,
        "completionMode": "Indexed",
        "parallelism": shape.hosts,
        "completions": shape.hosts,
        "template": {"spec": {**pod_spec, "subdomain": "t"}},
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "t"}, "spec": spec}


def admitted(obj: dict[str, Any]) -> decide.Verdict:
    """mutate, apply, validate: what the API server stores and then checks."""
    workload = workload_of(obj)
    stored = apply(obj, decide.mutate(obj, workload, CATALOG, OPTIONS).patch)
    return decide.validate(stored, workload, CATALOG)


TPU = "google.com/tpu"
SHAPE_IDS = [f"{s.accelerator} {s.topology} at {s.chips_per_host} per host" for s in SHAPES]


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_every_listed_catalog_shape_is_admitted_without_findings(shape: SliceShape) -> None:
    verdict = admitted(manifest_for(shape, shape.chips_per_host))
    assert findings(verdict.denials) == []
    assert findings(verdict.warnings) == []


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_every_listed_catalog_shape_rejects_a_chip_count_it_does_not_run(
    shape: SliceShape,
) -> None:
    runs = {
        s.chips_per_host
        for s in CATALOG.shapes(CATALOG.accelerators[shape.accelerator], shape.topology)
    }
    verdict = admitted(manifest_for(shape, max(runs) + 1))
    assert [code for code, _ in findings(verdict.denials)] == ["tpu.chips-per-host"]
