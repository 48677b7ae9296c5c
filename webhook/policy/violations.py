"""A rule's finding, formatted like a Kubernetes field error.

spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 3: tpu-v5-lite-podslice
2x4 runs 4 or 8 chips per host; set requests and limits to 4 or 8
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from webhook.policy.paths import FieldPath


class ErrorType(Enum):
    INVALID = "Invalid value"
    REQUIRED = "Required value"
    UNSUPPORTED = "Unsupported value"
    FORBIDDEN = "Forbidden"
    DEFAULTED = "Defaulted"  # warnings about a value tpu-webhook filled in


_NO_VALUE = object()


@dataclass(frozen=True, slots=True)
class Violation:
    code: str
    field: FieldPath
    error: ErrorType
    detail: str
    value: object = _NO_VALUE
    advisory: bool = False  # a warning, never a denial

    @property
    def message(self) -> str:
        if self.error in (ErrorType.REQUIRED, ErrorType.FORBIDDEN) or self.value is _NO_VALUE:
            return f"{self.field}: {self.error.value}: {self.detail}"
        return f"{self.field}: {self.error.value}: {render_value(self.value)}: {self.detail}"


def render_value(value: object) -> str:
    """Values as the API server prints them: strings quoted, numbers bare."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, default=str)


def aggregate(violations: Sequence[Violation]) -> str:
    """One message as Kubernetes aggregates errors: `a` or `[a, b]`."""
    messages = [v.message for v in violations]
    return messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
