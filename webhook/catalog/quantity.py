"""Kubernetes resource quantities, parsed exactly as the API server does (to a Decimal).

`kubernetes.utils.parse_quantity` is the oracle in the tests; it is not imported here because
importing the client costs more than a whole admission request.
"""

from __future__ import annotations

import re
from decimal import Context, Decimal

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
    r"(?:(?P<suffix>[KMGTPE]i|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
# Exact arithmetic for every realistic quantity; anything beyond 10^MAX_EXPONENT (an exabyte is
# 10^18) is refused rather than computed, so a hostile "1e999999" costs nothing.
_CONTEXT = Context(prec=100, Emax=10_000, Emin=-10_000)
MAX_EXPONENT = 30
MIN_EXPONENT = 9_000


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


class QuantityOutOfRange(QuantityError):
    """A valid quantity beyond 10^MAX_EXPONENT: larger than any resource of any machine."""


def parse_quantity(value: object) -> Decimal:
    """`"500Gi"`, `"1.5"`, `"100m"`, `"1e3"`, `4` -> the exact amount; QuantityError otherwise."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        if abs(value) >= 10**MAX_EXPONENT:
            raise QuantityOutOfRange(f"quantity out of range: {value!r}")
        return Decimal(value)
    text = str(value) if isinstance(value, float) else value
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f"not a quantity: {value!r}")
    number = Decimal(match["number"])
    exponent = match["exponent"]
    if exponent is not None:
        # int() of thousands of digits is itself slow: any exponent that long is out of range.
        shift = int(exponent) if len(exponent) <= 8 else int(exponent[0] + "1" + "0" * 8)
        size = number.adjusted() + shift if number else 0
        if size > MAX_EXPONENT:
            raise QuantityOutOfRange(f"quantity out of range: {value!r}")
        if size < -MIN_EXPONENT:
            raise QuantityError(f"quantity too small: {value!r}")
        amount = number.scaleb(shift, _CONTEXT) if number else number
    else:
        amount = _CONTEXT.multiply(number, _SUFFIXES[match["suffix"] or ""])
    if amount and amount.copy_abs().adjusted() > MAX_EXPONENT:
        raise QuantityOutOfRange(f"quantity out of range: {value!r}")
    return amount


def format_quantity(amount: Decimal) -> str:
    """A readable form for messages: whole numbers without exponent, fractions as given."""
    if not amount.is_finite():
        return f"more than 1e{MAX_EXPONENT}"
    normal = amount.normalize()
    if normal == normal.to_integral_value():
        return str(int(normal))
    return format(normal, "f")
