"""Scalars as kubectl reads them: go-yaml v2's `resolve` (YAML 1.1), then sigs.k8s.io/yaml's
conversion to JSON and kubectl's JSON numbers.

So `yes`, `on` and `y` are true, `010` is 8, `0x1F` is 31, `1_000` is 1000, `1e3` and `1.0` are the
integers 1000 and 1 (Go writes the float64 as JSON `1000`, which kubectl reads as an int64), a
timestamp stays the string written, `!!binary` is decoded, and a custom tag (`!foo v`) is ignored.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from decimal import Decimal
from typing import Any

PREFIX = "tag:yaml.org,2002:"
STR, BOOL, INT, FLOAT = PREFIX + "str", PREFIX + "bool", PREFIX + "int", PREFIX + "float"
NULL, TIMESTAMP, BINARY, MERGE = (
    PREFIX + "null",
    PREFIX + "timestamp",
    PREFIX + "binary",
    PREFIX + "merge",
)
_RESOLVABLE = {None, "", STR, BOOL, INT, FLOAT, NULL, TIMESTAMP}
INT64_MAX, UINT64_MAX = 2**63 - 1, 2**64 - 1

_WORDS: dict[str, tuple[str, Any]] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE"), (BOOL, True)),
    **dict.fromkeys(("on", "On", "ON"), (BOOL, True)),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE"), (BOOL, False)),
    **dict.fromkeys(("off", "Off", "OFF"), (BOOL, False)),
    **{w: (NULL, None) for w in ("", "~", "null", "Null", "NULL")},
    **{w: (FLOAT, math.nan) for w in (".nan", ".NaN", ".NAN")},
    **{w: (FLOAT, math.inf) for w in (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")},
    **{w: (FLOAT, -math.inf) for w in ("-.inf", "-.Inf", "-.INF")},
    "<<": (MERGE, "<<"),
}
_HINTS = {**dict.fromkeys("+-", "S"), **dict.fromkeys("0123456789", "D")}
_HINTS |= {**dict.fromkeys("yYnNtTfFoO~", "M"), ".": "."}
# Go's strconv.ParseInt(s, 0, 64) syntax (underscores already removed by go-yaml)
_GO_INT = re.compile(r"([+-]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_DOT_FLOAT = re.compile(r"\.[0-9]+([eE][-+]?[0-9]+)?")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ][0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}.*)?")


class ResolveError(ValueError):
    pass


def scalar_value(tag: str | None, text: str, plain: bool) -> Any:
    """The Go value go-yaml decodes a scalar node to (ints beyond int64 are uint64s)."""
    if not tag and not plain:
        return text  # quoted or block scalars are strings
    rtag, value = resolve(tag or "", text)
    if rtag == BINARY:
        try:
            return base64.b64decode("".join(text.split()), validate=True).decode("utf-8", "replace")
        except binascii.Error:
            raise ResolveError("!!binary value contains invalid base64 data") from None
    return value


def json_number(value: int | float) -> int | float:
    """What kubectl reads back from the JSON sigs.k8s.io/yaml writes for a Go number."""
    if isinstance(value, int):
        return value if value <= INT64_MAX else float(value)  # a uint64 is read as a float64
    if math.isnan(value) or math.isinf(value):
        shown = "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
        raise ResolveError(f"json: unsupported value: {shown}")
    if value.is_integer() and abs(value) < 1e21:
        written = int(Decimal(repr(value)))  # Go writes the shortest digits: 1000.0 as `1000`
        if -(2**63) <= written <= INT64_MAX:
            return written  # which kubectl reads as an int64
    return value


def resolve(tag: str, text: str) -> tuple[str, Any]:
    """go-yaml v2 `resolve(tag, in)`: the resolved tag and a Python value."""
    if tag not in _RESOLVABLE:
        return tag, text
    rtag, value = _implicit(tag, text)
    if tag in ("", rtag, STR, BINARY):
        return rtag, value
    if tag == FLOAT and rtag == INT:
        return FLOAT, float(value)
    raise ResolveError(f"cannot decode {_short(rtag)} `{text}` as a {_short(tag)}")


def _implicit(tag: str, text: str) -> tuple[str, Any]:
    hint = _HINTS.get(text[0]) if text else "N"
    if hint is None or tag in (STR, BINARY):
        return STR, text
    if text in _WORDS:
        return _WORDS[text]
    if hint == "." and _DOT_FLOAT.fullmatch(text):
        return _finite_float(text)
    if hint in ("D", "S"):
        if tag in ("", TIMESTAMP) and _TIMESTAMP.fullmatch(text):
            return TIMESTAMP, text
        plain = text.replace("_", "")
        number = _go_int(plain)
        if number is not None:
            return INT, number
        if _YAML_FLOAT.fullmatch(plain):
            return _finite_float(plain)
    return STR, text


def _go_int(text: str) -> int | None:
    match = _GO_INT.fullmatch(text)
    if match is None:
        return None
    sign, digits = match.groups()
    if digits[:2].lower() in ("0x", "0o", "0b"):
        base, body = {"x": 16, "o": 8, "b": 2}[digits[1].lower()], digits[2:]
    elif digits.startswith("0"):
        base, body = 8, digits
    else:
        base, body = 10, digits
    magnitude = int(body, base)
    value = -magnitude if sign == "-" else magnitude
    if -(2**63) <= value <= INT64_MAX or (not sign and value <= UINT64_MAX):
        return value  # ParseInt, or ParseUint for unsigned values beyond int64
    return None


def _finite_float(text: str) -> tuple[str, Any]:
    value = float(text)
    return (FLOAT, value) if not math.isinf(value) else (STR, text)  # Go: ErrRange


def typed_key(value: Any) -> tuple[str, Any]:
    """A Go map key: 1, 1.0, true and "1" are four different keys (Python would merge three)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("i" if value <= INT64_MAX else "u", value)
    if isinstance(value, float):
        return ("f", value)
    if value is None:
        return ("n", None)
    return ("s", value)


def key_string(key: tuple[str, Any]) -> str:
    """sigs.k8s.io/yaml: a Go map key as a JSON object key."""
    kind, value = key
    if kind == "s":
        return str(value)
    if kind == "b":
        return "true" if value else "false"
    if kind == "i":
        return str(value)
    if kind == "f":
        return _float32_g(value)
    shown = "null" if kind == "n" else f"uint64 {value}"
    raise ResolveError(f"unsupported map key: {shown}")


def _float32_g(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32)."""
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    if math.isnan(value):
        return ".nan"
    single = struct.unpack("f", struct.pack("f", value))[0]
    for digits in range(1, 10):
        text = f"{single:.{digits - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            break
    mantissa, exponent = text.split("e")
    exp = int(exponent)
    if exp < -4 or exp >= 6:  # Go's %g with the shortest precision
        return f"{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return f"{float(text):f}".rstrip("0").rstrip(".")


def _short(tag: str) -> str:
    return "!!" + tag[len(PREFIX) :] if tag.startswith(PREFIX) else tag
