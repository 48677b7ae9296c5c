"""The packaged catalog's invariants, extension files, and how broken catalog files are reported."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from webhook.catalog import CatalogError, load_catalog
from webhook.catalog.tpu import topology_dimensions
from webhook.policy import decide
from webhook.policy.workloads import workload_for

CATALOG = load_catalog()
ACCELERATORS = list(CATALOG.accelerators.values())
NAMES = [a.name for a in ACCELERATORS]


def chips(topology: str) -> int:
    dims = topology_dimensions(topology)
    assert dims is not None, topology
    return math.prod(dims)


# Transcribed from /work/shared/tpu-facts.md (GKE and Cloud TPU docs, xpk's system table), not
# computed: per accelerator, machine type -> chips per VM, and topology -> the ways to run it as
# (hosts, chips per host). The catalog must offer at least these, exactly so.
FACTS: dict[str, tuple[dict[str, int], dict[str, set[tuple[int, int]]]]] = {
    "tpu-v4-podslice": (
        {"ct4p-hightpu-4t": 4},
        {
            "2x2x1": {(1, 4)},
            "2x2x2": {(2, 4)},
            "2x2x4": {(4, 4)},
            "2x4x4": {(8, 4)},
            "4x4x4": {(16, 4)},
            "4x4x8": {(32, 4)},
            "4x8x8": {(64, 4)},
            "8x8x8": {(128, 4)},
            "8x8x12": {(192, 4)},
            "8x8x16": {(256, 4)},
            "8x16x16": {(512, 4)},
        },
    ),
    "tpu-v5-lite-podslice": (
        {"ct5lp-hightpu-1t": 1, "ct5lp-hightpu-4t": 4, "ct5lp-hightpu-8t": 8},
        {
            "1x1": {(1, 1)},
            "2x2": {(1, 4)},
            "2x4": {(1, 8), (2, 4)},
            "4x4": {(4, 4)},
            "4x8": {(8, 4)},
            "8x8": {(16, 4)},
            "8x16": {(32, 4)},
            "16x16": {(64, 4)},
        },
    ),
    "tpu-v5-lite-device": (
        {"ct5l-hightpu-1t": 1, "ct5l-hightpu-4t": 4, "ct5l-hightpu-8t": 8},
        {"1x1": {(1, 1)}, "2x2": {(1, 4)}, "2x4": {(1, 8)}},
    ),
    "tpu-v5p-slice": (
        {"ct5p-hightpu-4t": 4},
        {
            "2x2x1": {(1, 4)},
            "2x2x2": {(2, 4)},
            "2x2x4": {(4, 4)},
            "2x4x4": {(8, 4)},
            "4x4x4": {(16, 4)},  # every dimension a multiple of 4
            "4x8x12": {(96, 4)},
            "16x20x28": {(2240, 4)},  # the largest listed
        },
    ),
    "tpu-v6e-slice": (
        {"ct6e-standard-1t": 1, "ct6e-standard-4t": 4, "ct6e-standard-8t": 8},
        {
            "1x1": {(1, 1)},
            "2x2": {(1, 4)},
            "2x4": {(1, 8), (2, 4)},
            "4x4": {(4, 4)},
            "4x8": {(8, 4)},
            "8x8": {(16, 4)},
            "8x16": {(32, 4)},
            "16x16": {(64, 4)},
        },
    ),
    "tpu7x": (
        {"tpu7x-standard-4t": 4, "tpu7x-standard-1t": 1},  # 1t: ecosystem-facts.md
        {
            "1x1x1": {(1, 1)},
            "2x2x1": {(1, 4)},
            "2x2x2": {(2, 4)},
            "2x2x4": {(4, 4)},
            "2x4x4": {(8, 4)},
            "4x4x4": {(16, 4)},
            "4x4x8": {(32, 4)},
            "4x8x8": {(64, 4)},
            "8x8x8": {(128, 4)},
            "8x8x16": {(256, 4)},
            "8x16x16": {(512, 4)},
        },
    ),
}


def test_packaged_catalog_has_the_documented_accelerators() -> None:
    """Every accelerator of the sources, in their order (the order messages list them); an
    accelerator beyond them is the catalog's to add."""
    assert [name for name in NAMES if name in FACTS] == list(FACTS)


# Per-VM vCPU and memory (tpu-facts.md); where sources disagree the larger figure is listed.
CAPACITY = {
    "ct4p-hightpu-4t": ("240", "407G"),
    "ct5lp-hightpu-8t": ("224", "384G"),
    "ct5p-hightpu-4t": ("208", "448G"),
    "ct6e-standard-4t": ("180", "720Gi"),
    "ct6e-standard-8t": ("180", "1440Gi"),
    "tpu7x-standard-4t": ("224", "992Gi"),
}
# Never offered: v5e and v6e are two-dimensional, v4/v5p/tpu7x three; v5p's rule wants every
# dimension a multiple of 4; 2x8 is unconfirmed (one source only).
NOT_OFFERED = {
    "tpu-v5-lite-podslice": ("2x8", "2x2x2", "3x3"),
    "tpu-v5-lite-device": ("4x4", "2x2x1"),
    "tpu-v5p-slice": ("4x4x6", "6x4x4", "2x2"),
    "tpu-v6e-slice": ("2x8", "2x2x1"),
    "tpu-v4-podslice": ("2x2", "4x4x6"),
}


@pytest.mark.parametrize("name", FACTS, ids=list(FACTS))
def test_the_machine_types_have_the_documented_chips_per_vm(name: str) -> None:
    machines, _ = FACTS[name]
    accelerator = CATALOG.accelerators[name]
    assert {m.name: m.chips for m in accelerator.machine_types} == machines


@pytest.mark.parametrize("name", FACTS, ids=list(FACTS))
def test_each_documented_topology_runs_as_the_documented_hosts(name: str) -> None:
    _, topologies = FACTS[name]
    accelerator = CATALOG.accelerators[name]
    offered = {
        topology: {(s.hosts, s.chips_per_host) for s in CATALOG.shapes(accelerator, topology)}
        for topology in topologies
    }
    assert offered == topologies


@pytest.mark.parametrize("name", NOT_OFFERED, ids=list(NOT_OFFERED))
def test_topologies_the_sources_do_not_offer_are_not_in_the_catalog(name: str) -> None:
    accelerator = CATALOG.accelerators[name]
    assert [t for t in NOT_OFFERED[name] if CATALOG.shapes(accelerator, t)] == []


@pytest.mark.parametrize("machine", CAPACITY, ids=list(CAPACITY))
def test_vm_capacity_is_the_documented_one(machine: str) -> None:
    (found,) = [m for a in ACCELERATORS for m in a.machine_types if m.name == machine]
    assert (found.cpu_text, found.memory_text) == CAPACITY[machine]


def test_v4_2x2x4_is_four_hosts_of_four_chips() -> None:
    (shape,) = CATALOG.shapes(CATALOG.accelerators["tpu-v4-podslice"], "2x2x4")
    assert (shape.chips, shape.hosts, shape.chips_per_host, shape.multi_host) == (16, 4, 4, True)
    assert shape.describe() == "2x2x4 = 16 chips at 4 per host needs 4 hosts"


def test_v5e_2x4_is_one_host_of_eight_or_two_hosts_of_four() -> None:
    shapes = CATALOG.shapes(CATALOG.accelerators["tpu-v5-lite-podslice"], "2x4")
    assert sorted((s.hosts, s.chips_per_host) for s in shapes) == [(1, 8), (2, 4)]


def test_v5e_serving_2x4_is_only_one_host_of_eight() -> None:
    shapes = CATALOG.shapes(CATALOG.accelerators["tpu-v5-lite-device"], "2x4")
    assert [(s.hosts, s.chips_per_host) for s in shapes] == [(1, 8)]


def test_v5p_ruled_topologies_include_multiples_of_four_and_the_largest_listed() -> None:
    offered = CATALOG.accelerators["tpu-v5p-slice"].shapes
    assert {"16x20x28", "4x4x4", "4x4x8", "8x8x8", "16x16x16"} <= set(offered)
    assert {"6x4x4", "4x4x6", "8x4x4", "20x20x24"} & set(offered) == set()


def test_v5p_ruled_topologies_stay_within_the_chip_limit_and_the_rule() -> None:
    v5p = CATALOG.accelerators["tpu-v5p-slice"]
    ruled = [t for t in v5p.shapes if t not in (*v5p.single_host, *v5p.multi_host)]
    dims = [topology_dimensions(t) or () for t in ruled]
    assert len(ruled) > 100
    assert [d for d in dims if math.prod(d) > 8960] == []
    assert [d for d in dims if any(side % 4 for side in d) or list(d) != sorted(d)] == []


def test_ports_unverified_labels_and_machine_types_are_indexed() -> None:
    assert [(p.name, p.container_port) for p in CATALOG.ports] == [
        ("tpu-comm", 8471),
        ("tpu-metrics", 8431),
    ]
    assert CATALOG.unverified == frozenset({"tpu7"})
    assert CATALOG.near_miss("tpu7") is None
    assert CATALOG.near_miss("ct5lp-hightpu-4t") == "tpu-v5-lite-podslice"
    assert CATALOG.is_machine_type("tpu7x-standard-4t")


@pytest.mark.parametrize(
    ("label", "meant"),
    [
        ("tpu-v5p-slise", "tpu-v5p-slice"),
        ("tpu-v4-podslise", "tpu-v4-podslice"),
        ("TPU-V6E-SLICE", "tpu-v6e-slice"),
        ("tpu-v9-slice", None),
        ("tpu8x", None),
        ("tpu-v7-slice", None),
    ],
)
def test_a_typo_keeps_its_generation_and_a_new_generation_is_no_typo(
    label: str, meant: str | None
) -> None:
    assert CATALOG.near_miss(label) == meant


EXTRA_ACCELERATOR = """\
version: 1
accelerators:
  - name: tpu-v9-slice
    generation: v9
    dimensions: 2
    machineTypes:
      - {name: ct9-standard-4t, chips: 4, cpu: "200", memory: 1Ti}
    singleHost: [2x2]
    multiHost: {chipsPerHost: 4, topologies: [4x4]}
"""


def write(tmp_path: Path, text: str, name: str = "extra.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, "utf-8")
    return path


def test_an_extension_file_adds_an_accelerator_and_keeps_the_packaged_ones(
    tmp_path: Path,
) -> None:
    catalog = load_catalog(write(tmp_path, EXTRA_ACCELERATOR))
    assert list(catalog.accelerators) == [*NAMES, "tpu-v9-slice"]
    (shape,) = catalog.shapes(catalog.accelerators["tpu-v9-slice"], "4x4")
    assert (shape.hosts, shape.chips_per_host) == (4, 4)
    assert catalog.ports == CATALOG.ports
    assert catalog.unverified == CATALOG.unverified


def test_a_replacement_file_is_the_whole_catalog(tmp_path: Path) -> None:
    text = EXTRA_ACCELERATOR.replace("version: 1\n", "version: 1\nreplacePackaged: true\n")
    catalog = load_catalog(write(tmp_path, text))
    assert list(catalog.accelerators) == ["tpu-v9-slice"]
    assert catalog.ports == ()


def test_an_extension_file_replaces_an_accelerator_of_the_same_name(tmp_path: Path) -> None:
    replacement = """\
version: 1
accelerators:
  - name: tpu-v5-lite-podslice
    generation: v5e
    dimensions: 2
    machineTypes:
      - {name: ct5lp-hightpu-4t, chips: 4, cpu: "112", memory: 192G}
    multiHost: {chipsPerHost: 4, topologies: [2x8]}
"""
    catalog = load_catalog(write(tmp_path, replacement))
    v5e = catalog.accelerators["tpu-v5-lite-podslice"]
    assert list(catalog.accelerators) == NAMES
    assert list(v5e.shapes) == ["2x8"]
    assert [m.name for m in v5e.machine_types] == ["ct5lp-hightpu-4t"]


def test_an_extended_catalog_admits_the_topology_it_adds(tmp_path: Path) -> None:
    catalog = load_catalog(write(tmp_path, EXTRA_ACCELERATOR))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "t"},
        "spec": {
            "nodeSelector": {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v9-slice",
                "cloud.google.com/gke-tpu-topology": "2x2",
            },
            "containers": [{"name": "m", "resources": {"limits": {"google.com/tpu": 4}}}],
        },
    }
    workload = workload_for("", "Pod")
    assert workload is not None
    assert decide.validate(pod, workload, catalog).codes == []
    assert decide.validate(pod, workload, CATALOG).codes == ["tpu.accelerator-unknown"]


def test_an_extension_file_replaces_the_ports_and_unverified_lists(tmp_path: Path) -> None:
    text = "version: 1\nports: [{name: ici, containerPort: 8471}]\nunverifiedAccelerators: []\n"
    catalog = load_catalog(write(tmp_path, text))
    assert [(p.name, p.container_port) for p in catalog.ports] == [("ici", 8471)]
    assert catalog.unverified == frozenset()


BROKEN = {
    "chips-not-a-number": (
        EXTRA_ACCELERATOR.replace("chips: 4", "chips: four"),
        "accelerators[tpu-v9-slice].machineTypes[ct9-standard-4t].chips: Input should be",
    ),
    "topology-with-wrong-dimensions": (
        EXTRA_ACCELERATOR.replace("dimensions: 2", "dimensions: 3"),
        "topology '2x2' must have 3 dimensions",
    ),
    "unknown-key": (
        "version: 1\nacceleratorz: []\n",
        "acceleratorz: Extra inputs are not permitted",
    ),
    "duplicate-key": ("version: 1\nversion: 1\n", 'duplicate key "version"'),
    "memory-not-a-quantity": (
        EXTRA_ACCELERATOR.replace("memory: 1Ti", "memory: lots"),
        "accelerators[tpu-v9-slice].machineTypes[ct9-standard-4t].memory: Value error",
    ),
    "single-host-chips-match-no-machine": (
        EXTRA_ACCELERATOR.replace("singleHost: [2x2]", "singleHost: [2x4]"),
        "single-host topology 2x4 has 8 chips but no machine type has 8",
    ),
    "chips-per-host-match-no-machine": (
        EXTRA_ACCELERATOR.replace("chipsPerHost: 4", "chipsPerHost: 8"),
        "multiHost.chipsPerHost 8 matches no machine type",
    ),
    "rule-without-max-chips": (
        EXTRA_ACCELERATOR.replace("topologies: [4x4]}", "topologies: [4x4], multipleOf: 4}"),
        "multipleOf and maxChips go together",
    ),
    "unsupported-version": ("version: 2\n", "version"),
    "not-a-mapping": ("- just\n- a list\n", "(top level)"),
}


@pytest.mark.parametrize(("text", "names"), BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_catalog_file_fails_naming_the_file_and_the_field(
    tmp_path: Path, text: str, names: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(CatalogError) as error:
        load_catalog(path)
    assert str(error.value).startswith(f"catalog {path}: ")
    assert names in str(error.value)


def test_a_duplicate_key_error_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"line: 2"):
        load_catalog(write(tmp_path, "version: 1\nversion: 1\n"))


def test_a_missing_catalog_file_fails_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(CatalogError) as error:
        load_catalog(missing)
    assert str(error.value) == f"catalog {missing}: cannot read: No such file or directory"
