"""Kubernetes resource quantities, parsed exactly as the API server does (to a Decimal).

`kubernetes.utils.parse_quantity` is the oracle in the tests; it is not imported here because
importing the client costs more than a whole admission request.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """`"500Gi"`, `"1.5"`, `"100m"`, `"1e3"`, `4` -> the exact amount; QuantityError otherwise."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    text = str(value) if isinstance(value, float) else value
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f"not a quantity: {value!r}")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as error:  # pragma: no cover - the pattern admits only decimals
        raise QuantityError(f"not a quantity: {value!r}") from error
    suffix = match["suffix"] or ""
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number.scaleb(int(suffix[1:]))
    return number * _SUFFIXES[suffix]


def format_quantity(amount: Decimal) -> str:
    """A readable form for messages: whole numbers without exponent, fractions as given."""
    normal = amount.normalize()
    if normal == normal.to_integral_value():
        return str(int(normal))
    return format(normal, "f")
