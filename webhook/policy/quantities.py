"""Quantities as a rule reads them: the amount, or the whole count of chips, of a value as sent;
remembered for the few short values a cluster uses."""

from __future__ import annotations

import functools
from decimal import Decimal

from webhook.catalog.quantity import QuantityError, QuantityOutOfRange, parse_quantity


def whole_number(value: object) -> int | None:
    """The count a quantity is when it is a whole, non-negative number; None otherwise."""
    if (type(value) is str and len(value) <= MEMO_LENGTH) or _memo(value):  # str: no call
        return _remembered_whole_number(value)
    return _whole_number(value)


def quantity(value: object) -> Decimal | None:
    """The amount; +/-Infinity beyond the parser's range (larger than any VM); None if invalid."""
    if (type(value) is str and len(value) <= MEMO_LENGTH) or _memo(value):  # str: no call
        return _remembered_quantity(value)
    last = _last_long[0]  # one read: the worker thread of large reviews may replace it
    if value is last[0]:
        return last[1]  # the same long string again: rules read one value several times
    amount = _quantity(value)
    if isinstance(value, str):
        _last_long[0] = (value, amount)
    return amount


def _whole_number(value: object) -> int | None:
    amount = quantity(value)
    if (
        amount is None
        or not amount.is_finite()
        or amount < 0
        or amount != amount.to_integral_value()
    ):
        return None
    return int(amount)


def _quantity(value: object) -> Decimal | None:
    try:
        return parse_quantity(value)
    except QuantityOutOfRange:
        return Decimal("-Infinity") if str(value).lstrip().startswith("-") else Decimal("Infinity")
    except QuantityError:
        return None


# Short strings and 64-bit ints are remembered: the API server writes quantities as strings (a
# manifest read offline has ints too), a cluster uses few ("4", "500Gi"), and a cache hit costs a
# tenth of a parse. Anything longer is parsed each time, so the caches never pin a large value.
MEMO_SIZE = 4096
MEMO_LENGTH = 32


def _memo(value: object) -> bool:
    if isinstance(value, str):
        return len(value) <= MEMO_LENGTH
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


# The last long string parsed, by identity: a review reads a value in several rules, and a long
# one costs in proportion to its length. It holds at most one such string, until the next.
_last_long: list[tuple[object, Decimal | None]] = [(None, None)]
_remembered_quantity = functools.lru_cache(maxsize=MEMO_SIZE)(_quantity)
_remembered_whole_number = functools.lru_cache(maxsize=MEMO_SIZE)(_whole_number)
