"""The packaged catalog's invariants, extension files, and how broken catalog files are reported."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from webhook.catalog import Accelerator, CatalogError, load_catalog
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


def test_packaged_catalog_has_the_documented_accelerators() -> None:
    assert NAMES == [
        "tpu-v4-podslice",
        "tpu-v5-lite-podslice",
        "tpu-v5-lite-device",
        "tpu-v5p-slice",
        "tpu-v6e-slice",
        "tpu7x",
    ]


@pytest.mark.parametrize("accelerator", ACCELERATORS, ids=NAMES)
def test_every_single_host_topology_has_the_chips_of_a_machine_type(
    accelerator: Accelerator,
) -> None:
    machine_chips = {m.chips for m in accelerator.machine_types}
    assert [t for t in accelerator.single_host if chips(t) not in machine_chips] == []


@pytest.mark.parametrize("accelerator", ACCELERATORS, ids=NAMES)
def test_every_multi_host_topology_divides_into_hosts_of_chips_per_host(
    accelerator: Accelerator,
) -> None:
    per_host = accelerator.multi_host_chips_per_host or 1
    assert [t for t in accelerator.multi_host if chips(t) % per_host] == []


@pytest.mark.parametrize("accelerator", ACCELERATORS, ids=NAMES)
def test_every_topology_has_the_accelerators_number_of_dimensions(
    accelerator: Accelerator,
) -> None:
    wrong = [
        t for t in accelerator.shapes if len(topology_dimensions(t) or ()) != accelerator.dimensions
    ]
    assert wrong == []


@pytest.mark.parametrize("accelerator", ACCELERATORS, ids=NAMES)
def test_every_shape_multiplies_out_and_runs_on_a_known_machine_type(
    accelerator: Accelerator,
) -> None:
    shapes = [s for options in accelerator.shapes.values() for s in options]
    assert [s for s in shapes if s.chips != chips(s.topology)] == []
    assert [s for s in shapes if s.chips != s.chips_per_host * s.hosts] == []
    assert [s for s in shapes if s.machine is None or s.machine.chips != s.chips_per_host] == []


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
