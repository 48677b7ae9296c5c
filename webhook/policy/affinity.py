"""The values a pod spec's required node affinity allows for a TPU label, read within bounds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.catalog.tpu import ACCELERATOR_LABEL, TOPOLOGY_LABEL
from webhook.policy.bounds import MAX_AFFINITY_TERMS


class Chosen:
    """A label required by node affinity with several possible values (`In [a, b]`, `Exists`,
    or terms that disagree): the node's value is not known before scheduling."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<several values>"


SEVERAL = Chosen()
AFFINITY_TERMS = (
    "affinity",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
)


def _terms(spec: Mapping[str, Any]) -> list[Any]:
    """The required node-affinity terms, up to MAX_AFFINITY_TERMS."""
    node: Any = spec
    for name in AFFINITY_TERMS:
        node = node.get(name) if isinstance(node, dict) else None
    return node[:MAX_AFFINITY_TERMS] if isinstance(node, list) else []


def _expressions(term: object) -> list[Any]:
    """A term's matchExpressions, up to MAX_AFFINITY_TERMS."""
    expressions = term.get("matchExpressions") if isinstance(term, dict) else None
    return expressions[:MAX_AFFINITY_TERMS] if isinstance(expressions, list) else []


def _cut(spec: Mapping[str, Any]) -> bool:
    """Whether the required node affinity has more terms, or a term more expressions, than are
    read: then a TPU label it may name is not known in advance."""
    node: Any = spec
    for name in AFFINITY_TERMS:
        node = node.get(name) if isinstance(node, dict) else None
    if not isinstance(node, list):
        return False
    if len(node) > MAX_AFFINITY_TERMS:
        return True
    for term in node:
        expressions = term.get("matchExpressions") if isinstance(term, dict) else None
        if isinstance(expressions, list) and len(expressions) > MAX_AFFINITY_TERMS:
            return True
    return False


def names_tpu(spec: Mapping[str, Any]) -> bool:
    for term in _terms(spec):
        for expression in _expressions(term):
            key = expression.get("key") if isinstance(expression, dict) else None
            if key in (ACCELERATOR_LABEL, TOPOLOGY_LABEL):
                return True
    return False


def value_of(spec: Mapping[str, Any], label: str, sources: dict[str, tuple[int, int]]) -> object:
    """The one value a required node-affinity allows for `label` (`In` with one value, the
    same in every term that names it), SEVERAL when it allows more, None when none names it.
    Terms are ORed: a term that does not name the label lets the Pod go to any such node."""
    value: object = None
    named = unnamed = 0
    for t, term in enumerate(_terms(spec)):
        found = False
        for e, expression in enumerate(_expressions(term)):
            if not isinstance(expression, dict) or expression.get("key") != label:
                continue
            values = expression.get("values")
            one = (
                values[0]
                if expression.get("operator") == "In"
                and isinstance(values, list)
                and len(values) == 1
                else SEVERAL
            )
            if found:
                continue  # several expressions on one label are ANDed: the first one decides
            found = True
            if value is None:
                value = one
                sources[label] = (t, e)
            elif value != one:
                value = SEVERAL
        named += found
        unnamed += not found
    if named and unnamed:
        return SEVERAL
    if value is not None and _cut(spec):
        return SEVERAL  # a term beyond the bound may allow other nodes
    return value
