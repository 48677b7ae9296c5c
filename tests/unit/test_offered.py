"""The shapes a cluster offers, read from its objects (webhook/policy/offered.py): xpk's device
types, the node pools named, the bounds of a message. The verdicts are in
tests/cases/validate/offered.yaml."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.catalog import load_catalog
from webhook.policy.offered import (
    MAX_SHAPES_NAMED,
    Declared,
    OfferPolicy,
    offered_of,
    xpk_device_shapes,
)

CATALOG = load_catalog()


@pytest.mark.parametrize(
    ("device", "shapes"),
    [
        ("v6e-16", [("tpu-v6e-slice", "4x4")]),  # 16 chips at one TensorCore each
        ("v5litepod-8", [("tpu-v5-lite-podslice", "2x4")]),
        ("v5p-128", [("tpu-v5p-slice", "4x4x4")]),  # 128 TensorCores: 64 chips
        ("v4-8", [("tpu-v4-podslice", "2x2x1")]),
        ("v6e-4x4", [("tpu-v6e-slice", "4x4")]),  # xpk's `<prefix>-<topology>` keys
        ("v6e-15", []),  # no topology of 15 chips
        ("v9-16", []),  # a prefix the catalog does not know
        ("xpk_version", []),
        ("-16", []),
    ],
)
def test_xpk_device_types_name_the_catalog_s_shapes(
    device: str, shapes: list[tuple[str, str]]
) -> None:
    assert xpk_device_shapes(device, CATALOG) == shapes


def _node(name: str, pool: str | None, accelerator: str = "tpu-v6e-slice") -> dict[str, Any]:
    labels = {
        "cloud.google.com/gke-tpu-accelerator": accelerator,
        "cloud.google.com/gke-tpu-topology": "2x4",
    }
    if pool is not None:
        labels["cloud.google.com/gke-nodepool"] = pool
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def test_nodes_are_counted_by_node_pool_and_at_most_three_pools_are_named() -> None:
    nodes = [_node(f"n{i}", f"pool-{i % 5}") for i in range(10)] + [_node("lone", None)]
    offered = offered_of(nodes)
    assert offered.describe() == (
        'tpu-v6e-slice 2x4 (1 node outside a node pool, node pool "pool-0" (2 nodes), '
        'node pool "pool-1" (2 nodes), and 3 more)'
    )


def test_a_message_names_at_most_a_bounded_number_of_shapes() -> None:
    declared = tuple(Declared("tpu-v6e-slice", (f"{n}x{n}",)) for n in range(1, 20))
    offered = offered_of([], policy=OfferPolicy(declared))
    described = offered.describe()
    assert described.count("(declared)") == MAX_SHAPES_NAMED
    assert described.endswith(f"; and {19 - MAX_SHAPES_NAMED} more")


def test_a_source_the_administrator_turned_off_offers_nothing() -> None:
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "v5e"},
        "spec": {"nodeLabels": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"}},
    }
    off = OfferPolicy(nodes=False, resource_flavors=False)
    assert offered_of([_node("n", "p"), flavor], policy=off).known is False
    on = offered_of([_node("n", "p"), flavor])
    assert on.offers("tpu-v5-lite-podslice", "16x16", "default")  # a flavor without a topology
    assert on.offers("tpu-v6e-slice", "2x4", "default")
    assert not on.offers("tpu-v6e-slice", "4x4", "default")


def test_values_longer_than_a_label_are_not_read() -> None:
    node = _node("n", "p", accelerator="x" * 64)
    assert offered_of([node]).known is False
