"""The chart's generated files are what webhook/registration.py generates from the workload table,
and the UPDATE condition compares exactly what the server compares."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.registration import HOOKS, Kind, chart_files, spec_changed_expression

FILES = Path(__file__).resolve().parents[2] / "charts" / "tpu-webhook" / "files"


@pytest.mark.parametrize("name", sorted(chart_files()))
def test_the_chart_ships_the_generated_file(name: str) -> None:
    # `make chart-files` writes them; a change to the workload table must be regenerated
    assert (FILES / name).read_text() == chart_files()[name]


def test_every_generated_file_is_in_the_chart_and_nothing_else() -> None:
    assert sorted(p.name for p in FILES.iterdir()) == sorted(chart_files())


def test_an_update_is_sent_only_when_it_changes_the_spec_of_every_kind() -> None:
    # every kind of the table keeps its pod specs and host counts under `spec`: the one field
    # the server compares before it allows an UPDATE (webhook/policy/decide.py)
    assert spec_changed_expression() == (
        "request.operation != 'UPDATE'\n"
        "  || (has(object.spec) ? !has(oldObject.spec) || object.spec != oldObject.spec "
        ": has(oldObject.spec))"
    )


def test_a_kind_with_pod_specs_elsewhere_adds_its_field() -> None:
    kinds = (
        Kind("g", "v1", "A", "as", (("spec", "template", "spec"),)),
        Kind("g", "v1", "B", "bs", (("template", "spec"),), (("spec", "replicas"),)),
    )
    expression = spec_changed_expression(kinds)
    assert "object.template != oldObject.template" in expression
    assert "object.spec != oldObject.spec" in expression


def test_only_entries_that_are_sent_updates_carry_the_update_condition() -> None:
    assert {h.name: (h.operations, h.spec_changed) for h in HOOKS} == {
        "mutate": (("CREATE",), False),
        "validate": (("CREATE",), False),
        "validate-update": (("UPDATE",), True),
        "validate-warn": (("CREATE", "UPDATE"), True),
    }
