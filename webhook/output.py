"""What the CLI prints: verdicts as text, JSON or YAML, objects as YAML documents or a kubectl
List, and `explain`'s data."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from ruamel.yaml import YAML

from webhook.catalog import Accelerator, SliceShape
from webhook.examples import example_manifests
from webhook.offline import Result

# ruamel's representer recurses a few frames per level; kubectl reads 10,000 levels. Real
# objects nest about 20 deep; deeper ones are refused cleanly rather than half printed.
MAX_PRINTED_DEPTH = 100


class OutputError(ValueError):
    """An object the chosen output cannot print (exit code 2)."""


def dump(documents: Sequence[Any], output: str) -> str:
    """Objects as `---` YAML documents, or (json) one value as indented JSON."""
    for document in documents:
        if depth(document) > MAX_PRINTED_DEPTH:
            raise OutputError(
                f"an object nests {depth(document)} levels deep; tpu-webhook prints objects "
                f"up to {MAX_PRINTED_DEPTH} levels (check reads them)"
            )
    if output == "json":
        (value,) = documents
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n"
    return dump_yaml(documents)


def dump_yaml(documents: Sequence[Any]) -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096  # long values (hostnames, commands) stay on one line
    out = io.StringIO()
    yaml.dump_all(list(documents), out)
    return "---\n" + out.getvalue() if documents else ""


def kubectl_list(objects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several objects as `kubectl get -o json` prints them."""
    return {"apiVersion": "v1", "kind": "List", "items": list(objects), "metadata": {}}


def depth(value: Any) -> int:
    """How many containers deep a JSON value nests (without recursion)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, Mapping | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, Mapping) else item
            pending.extend((child, level + 1) for child in children)
    return deepest


def verdicts_text(results: Sequence[Result]) -> str:
    lines = []
    for r in results:
        verdict = "admitted with warnings" if r.warnings else "admitted"
        verdict = "denied" if r.denials else verdict
        count = len(r.patch)
        patched = f" (patched: {count} operation{'s' * (count != 1)})" if r.allowed else ""
        patched = patched if count else ""
        lines.append(f"{r.kind}/{r.name}: {verdict}{patched}")
        lines += [f"  error [{v.code}] {v.message}" for v in r.denials]
        lines += [f"  warning [{v.code}] {v.message}" for v in r.warnings]
    return "".join(line + "\n" for line in lines)


def accelerator_data(
    accelerator: Accelerator, shapes: Sequence[SliceShape], kind: str = "job"
) -> dict[str, Any]:
    """`explain -o json|yaml`: the accelerator, its shapes, and for one topology the manifests."""
    data: dict[str, Any] = {
        "accelerator": accelerator.name,
        "generation": accelerator.generation,
        "machineTypes": [
            {"name": m.name, "chips": m.chips, "cpu": m.cpu_text, "memory": m.memory_text}
            for m in accelerator.machine_types
        ],
        "topologies": list(dict.fromkeys((*accelerator.single_host, *accelerator.multi_host))),
        "shapes": [
            {
                "topology": s.topology,
                "chips": s.chips,
                "chipsPerHost": s.chips_per_host,
                "hosts": s.hosts,
                "machineType": s.machine.name if s.machine else None,
            }
            for s in shapes
        ],
    }
    if shapes and len({s.topology for s in shapes}) == 1:
        data["manifests"] = example_manifests(shapes[-1], kind)
    return data
