"""A rule's finding, formatted like a Kubernetes field error.

spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 3: tpu-v5-lite-podslice
2x4 runs 4 or 8 chips per host; set requests and limits to 4 or 8
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import NamedTuple

from webhook.policy.bounds import MAX_FINDINGS, MAX_VALUE_CHARS
from webhook.policy.paths import FieldPath


class ErrorType(StrEnum):  # a StrEnum formats as its value, with no descriptor call
    INVALID = "Invalid value"
    REQUIRED = "Required value"
    UNSUPPORTED = "Unsupported value"
    FORBIDDEN = "Forbidden"
    TOO_MANY = "Too many"
    NOT_FOUND = "Not found"
    UNKNOWN = "Unknown value"  # a value tpu-webhook cannot check (warnings)
    DEFAULTED = "Defaulted"  # warnings about a value tpu-webhook filled in


_NO_VALUE = object()
# Errors printed without the value (a class attribute of an enum costs a lookup on every read).
_VALUELESS = (ErrorType.REQUIRED, ErrorType.FORBIDDEN)
_INVALID, _REQUIRED = ErrorType.INVALID, ErrorType.REQUIRED
# A message is at most this long, whatever a rule put in it: the rest is cut.
MAX_MESSAGE_CHARS = 1024


class Violation(NamedTuple):
    """(A NamedTuple: made on every denial and warning, where a frozen dataclass pays a setattr
    per field.)"""

    code: str
    field: FieldPath
    error: ErrorType
    detail: str
    value: object = _NO_VALUE
    advisory: bool = False  # a warning, never a denial

    @property
    def message(self) -> str:
        if self.error in _VALUELESS or self.value is _NO_VALUE:
            text = f"{self.field}: {self.error}: {self.detail}"
        else:
            text = f"{self.field}: {self.error}: {render_value(self.value)}: {self.detail}"
        if len(text) > MAX_MESSAGE_CHARS:
            return text[: MAX_MESSAGE_CHARS - 20] + "... (message cut)"
        return text


# Constructors in the spirit of apimachinery's field errors (field.Invalid, field.Required,
# field.NotSupported, field.Forbidden): the rule code, then the field, [the value,] the detail.


def invalid(
    code: str, field: FieldPath, value: object, detail: str, *, advisory: bool = False
) -> Violation:
    return Violation(code, field, _INVALID, detail, value, advisory)


def required(code: str, field: FieldPath, detail: str, *, advisory: bool = False) -> Violation:
    return Violation(code, field, _REQUIRED, detail, _NO_VALUE, advisory)


def unsupported(
    code: str, field: FieldPath, value: object, detail: str, *, advisory: bool = False
) -> Violation:
    """A value of a known set, but not one of it (apimachinery's NotSupported)."""
    return invalid(code, field, value, detail, advisory=advisory)._replace(
        error=ErrorType.UNSUPPORTED
    )


def forbidden(code: str, field: FieldPath, detail: str, *, advisory: bool = False) -> Violation:
    """A field that must not be set here, whatever its value."""
    return required(code, field, detail, advisory=advisory)._replace(error=ErrorType.FORBIDDEN)


def render_value(value: object) -> str:
    """Values as the API server prints them: strings quoted, numbers bare; a long one cut to
    MAX_VALUE_CHARS characters, its length said."""
    if type(value) is int and -_SHORT_INT < value < _SHORT_INT:
        return str(value)  # most values (a chip count): printed whole, no cut to consider
    if isinstance(value, str):
        return json.dumps(shown(value))
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        text = repr(value) if isinstance(value, float) else _digits(value)
        return shown(text)
    return shown(json.dumps(value, sort_keys=True, default=str))


def shown(value: object) -> str:
    """A user's value as it is quoted inside a message: cut beyond MAX_VALUE_CHARS."""
    text = value if isinstance(value, str) else _digits(value) if _is_int(value) else str(value)
    if len(text) <= MAX_VALUE_CHARS:
        return text
    return f"{text[:MAX_VALUE_CHARS]}... ({len(text)} characters)"


def aggregate(violations: Sequence[Violation]) -> str:
    """One message as Kubernetes aggregates errors: `a` or `[a, b]`; at most MAX_FINDINGS of
    them, then `and N more`."""
    if len(violations) == 1:
        return violations[0].message  # most denials: no list, no join
    messages = [v.message for v in violations[:MAX_FINDINGS]]
    if len(violations) > MAX_FINDINGS:
        messages.append(f"and {len(violations) - MAX_FINDINGS} more")
    return messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_PRINTED_WHOLE = 10**100  # a module constant: Python folds no power this large into the code
_SHORT_INT = 10 ** (MAX_VALUE_CHARS - 1)  # its digits and a sign fit in MAX_VALUE_CHARS


def _digits(value: object) -> str:
    """An int's digits; one too large to print in full (Python refuses beyond 4,300 digits, and
    it would be slow) by its size."""
    assert isinstance(value, int)
    if -_PRINTED_WHOLE < value < _PRINTED_WHOLE:
        return str(value)
    return f"a number of {value.bit_length() * 30103 // 100000 + 1} digits"
