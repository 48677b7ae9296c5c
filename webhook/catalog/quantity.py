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
    **{suffix: Decimal(1000**i) for i, suffix in enumerate("kMGTPE", 1)},  # k: 10^3 ... E: 10^18
    **{f"{s}i": Decimal(1024**i) for i, s in enumerate("KMGTPE", 1)},  # Ki: 2^10 ... Ei: 2^60
}
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<suffix>[KMGTPE]i|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
# Exact arithmetic for every realistic quantity; anything beyond 10^MAX_EXPONENT (an exabyte is
# 10^18) is refused rather than computed, so a hostile "1e999999" costs nothing.
_CONTEXT = Context(prec=100, Emax=10_000, Emin=-10_000)
MAX_EXPONENT = 30
_LARGEST_INT = 10**MAX_EXPONENT  # computed once: a power is not folded into the code
MIN_EXPONENT = 9_000
# A number written with more characters is read by its significant digits (at most MAX_DIGITS
# of them, see _bounded) rather than parsed whole: a hostile "9" * 3_000_000 costs microseconds.
LONG_NUMBER = 64
MAX_DIGITS = 64
_WIDE = Context(prec=MAX_DIGITS + 1, Emax=10**17, Emin=-(10**17))


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


class QuantityOutOfRange(QuantityError):
    """A valid quantity beyond 10^MAX_EXPONENT: larger than any resource of any machine."""


def _bounded(sign: str, whole: bytes, fraction: bytes) -> Decimal:
    """A long number (`sign whole.fraction`, ASCII digits) by its first MAX_DIGITS significant
    digits. A dropped tail that is not all zeros leaves one more digit 1, so that whether the
    amount is whole, zero, or above a bound reads as it does from the whole number. Only scans
    at memchr speed touch the whole text: a 3 MB number costs about a millisecond."""
    digits = whole + fraction
    start = _first_nonzero(digits, 0)
    if start < 0:
        return Decimal(0)
    exponent = -len(fraction)  # the amount is int(digits) * 10^exponent
    if len(digits) - start > MAX_DIGITS:
        stop = start + MAX_DIGITS
        exponent += len(digits) - stop
        sticky = _first_nonzero(digits, stop) >= 0
        kept = digits[start:stop] + (b"1" if sticky else b"")
        exponent -= sticky
    else:
        kept = digits[start:]
    return Decimal(sign + kept.decode()).scaleb(exponent, _WIDE)


def _first_nonzero(digits: bytes, start: int) -> int:
    """The index of the first digit 1-9 at or after `start` (`digits` holds digits only), -1
    when there is none: one scan over the zeros, stopping at the first other digit."""
    rest = len(digits) - start
    zeros = rest - len(digits[start:].lstrip(b"0")) if rest > 0 else 0
    return start + zeros if zeros < rest else -1


def _split_long(text: str) -> tuple[Decimal, str, str | None] | None:
    """(number, suffix, exponent) of a long quantity, as _QUANTITY would match it, or None:
    the same grammar, read with whole-text scans that run in C (find, isdigit)."""
    if not text.isascii():
        return None
    data = text.encode("ascii")
    suffix, exponent = "", None
    if data[-2:] in _BINARY:
        number, suffix = data[:-2], data[-2:].decode()
    elif data[-1:] in _DECIMAL:
        number, suffix = data[:-1], data[-1:].decode()
    else:
        lower, upper = data.find(b"e"), data.find(b"E")
        if lower >= 0 and upper >= 0:
            return None
        at = max(lower, upper)
        number = data if at < 0 else data[:at]
        if at >= 0:
            written = data[at + 1 :]
            unsigned = written[1:] if written[:1] in (b"+", b"-") else written
            if not unsigned.isdigit():
                return None
            exponent = written.decode()
    sign = "-" if number[:1] == b"-" else ""
    whole, _, fraction = (number[1:] if number[:1] in (b"+", b"-") else number).partition(b".")
    if not (whole or fraction) or not (whole.isdigit() or not whole):
        return None
    if fraction and not fraction.isdigit():
        return None
    return _bounded(sign, whole, fraction), suffix, exponent


_DIGITS = b"0123456789"
_BINARY = frozenset(s.encode() for s in _SUFFIXES if len(s) == 2)
_DECIMAL = frozenset(s.encode() for s in _SUFFIXES if len(s) == 1)


def _short(value: object) -> str:
    """At most 64 characters of `value`, as Python writes it: only what is shown is printed."""
    if isinstance(value, str) and len(value) > 64:
        return repr(value[:64]) + "..."
    if isinstance(value, int) and value.bit_length() > 200:  # repr is quadratic in the digits
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 64 else text[:64] + "..."


def parse_quantity(value: object) -> Decimal:
    """`"500Gi"`, `"1.5"`, `"100m"`, `"1e3"`, `4` -> the exact amount; QuantityError otherwise."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"not a quantity: {_short(value)}")
    if isinstance(value, int):
        if abs(value) >= _LARGEST_INT:
            raise QuantityOutOfRange(f"quantity out of range: {_short(value)}")
        return Decimal(value)
    text = str(value) if isinstance(value, float) else value
    if len(text) <= LONG_NUMBER:
        match = _QUANTITY.fullmatch(text)
        if match is None:
            raise QuantityError(f"not a quantity: {_short(value)}")
        number = Decimal(match["number"])
        suffix, exponent = match["suffix"] or "", match["exponent"]
    else:
        parts = _split_long(text)
        if parts is None:
            raise QuantityError(f"not a quantity: {_short(value)}")
        number, suffix, exponent = parts
    if exponent is not None:
        # int() of thousands of digits is itself slow: any exponent that long is out of range.
        sign, magnitude = ("-", exponent[1:]) if exponent[:1] == "-" else ("", exponent.lstrip("+"))
        magnitude = magnitude.lstrip("0") or "0"
        shift = int(sign + magnitude) if len(magnitude) <= 8 else int(sign + "1" + "0" * 8)
        size = number.adjusted() + shift if number else 0
        if size > MAX_EXPONENT:
            raise QuantityOutOfRange(f"quantity out of range: {_short(value)}")
        if size < -MIN_EXPONENT:
            raise QuantityError(f"quantity too small: {_short(value)}")
        amount = _CONTEXT.plus(number.scaleb(shift, _WIDE)) if number else number
    else:
        # sized with the suffix's power of ten; the exact range check follows the multiply
        size = number.adjusted() + _SUFFIXES[suffix].adjusted() if number else 0
        if size > MAX_EXPONENT + 1:
            raise QuantityOutOfRange(f"quantity out of range: {_short(value)}")
        if size < -MIN_EXPONENT:
            return Decimal(1).copy_sign(number).scaleb(-MIN_EXPONENT)  # tiny, but not zero
        amount = _CONTEXT.multiply(number, _SUFFIXES[suffix])
    if amount and amount.copy_abs().adjusted() > MAX_EXPONENT:
        raise QuantityOutOfRange(f"quantity out of range: {_short(value)}")
    return amount


def format_quantity(amount: Decimal) -> str:
    """A readable form for messages: whole numbers without exponent, fractions as given."""
    if not amount.is_finite():
        return f"more than 1e{MAX_EXPONENT}"
    normal = amount.normalize()
    if normal == normal.to_integral_value():
        return str(int(normal))
    return format(normal, "f")
