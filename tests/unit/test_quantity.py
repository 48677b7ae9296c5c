"""`parse_quantity` against the Kubernetes client's, the oracle, on values and on garbage.

The oracle parses with Python's Decimal, so it is laxer than the API server on some garbage
(spaces, "NaN", "1_000", the suffix "K"); ours follows the API server's grammar and rejects those.
"""

from __future__ import annotations

from decimal import Decimal, localcontext

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as lossy_oracle

from webhook.catalog import quantity
from webhook.catalog.quantity import (
    QuantityError,
    QuantityOutOfRange,
    format_quantity,
    parse_quantity,
)
from webhook.policy import quantities as pq


def oracle(value: object) -> Decimal:
    """The client's parse_quantity, run with enough precision to be exact."""
    with localcontext() as context:
        context.prec = 100
        result: Decimal = lossy_oracle(value)
        return result


VALUES = [
    "500Gi",
    "1.5",
    "100m",
    "1e3",
    "1E3",
    "1e+3",
    "1e-3",
    "4k",
    "2E",
    "2Ei",
    ".5",
    "5.",
    "1.e3",
    "-.5e2",
    "+1",
    "-2Mi",
    "0",
    "407G",
    "1440Gi",
    "250n",
    "3u",
    "0.1n",
    "1Ki",
    "12Ti",
    "7P",
    "123456789012345678",
    4,
    0,
    -3,
    10**20,
]


@pytest.mark.parametrize("value", VALUES, ids=[repr(v) for v in VALUES])
def test_parses_a_quantity_to_the_same_amount_as_the_kubernetes_client(value: object) -> None:
    assert parse_quantity(value) == oracle(value)


def test_parses_the_exbibyte_suffix_instead_of_raising_value_error() -> None:
    # "Ei" matches the exponent branch ("E" + digits): int("i") raises ValueError, which no
    # caller catches (a `memory: 1Ei` request makes validate raise).
    assert parse_quantity("1Ei") == Decimal(2**60)


def test_refuses_quantities_beyond_its_range_instead_of_computing_them() -> None:
    # The API server accepts "1e1000000"; computing it exactly costs seconds per request, so
    # anything beyond 10^30 (far above any machine's cpu or memory) is "out of range" and the
    # rules treat it as larger than every VM.
    for value in ("1e1000000", "12345678901234567890123456789012", 10**31, "2e31"):
        with pytest.raises(QuantityOutOfRange):
            parse_quantity(value)


def test_keeps_every_digit_of_a_long_number_like_the_kubernetes_client() -> None:
    assert parse_quantity("123456789012345678901234567890") == oracle(
        "123456789012345678901234567890"
    )


GARBAGE = ["four", "", "1.2.3", "1ee3", "e3", ".", "+", "4ki", "1Mb", "0x10", "--1", "1e"]


@pytest.mark.parametrize("value", GARBAGE, ids=[repr(v) for v in GARBAGE])
def test_rejects_garbage_the_kubernetes_client_rejects_too(value: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)
    with pytest.raises(ValueError, match=r"."):
        oracle(value)


# Accepted by the oracle (Decimal strips spaces, knows NaN, Infinity and underscores; "K" and an
# exponent with a suffix pass its suffix split) but rejected by the API server's grammar.
LAX_ORACLE = ["4 Gi", " 4", "4\n", "NaN", "Infinity", "inf", "1_000", "4K", "1e3Gi", "٣"]


@pytest.mark.parametrize("value", LAX_ORACLE, ids=[repr(v) for v in LAX_ORACLE])
def test_rejects_what_the_api_server_rejects_where_the_oracle_is_lax(value: str) -> None:
    assert isinstance(oracle(value), Decimal)
    with pytest.raises(QuantityError):
        parse_quantity(value)


@pytest.mark.parametrize("value", [None, True, [], {}, object()])
def test_rejects_values_that_are_not_strings_or_numbers(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)


def test_a_float_is_read_as_written_in_yaml() -> None:
    assert parse_quantity(1.5) == Decimal("1.5")


digits = st.text("0123456789", min_size=1, max_size=12)
numbers = st.one_of(
    digits,
    st.builds("{}.{}".format, digits, st.text("0123456789", max_size=6)),
    st.builds(".{}".format, digits),
)
suffixes = st.one_of(
    st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "P", "E"]),
    st.sampled_from(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]),
    st.builds(
        "{}{}{}".format,
        st.sampled_from(["e", "E"]),
        st.sampled_from(["", "+", "-"]),
        st.integers(0, 30).map(str),
    ),
)
quantities = st.builds("{}{}{}".format, st.sampled_from(["", "+", "-"]), numbers, suffixes)


@settings(max_examples=300, deadline=None)
@given(quantities)
def test_parses_every_generated_quantity_like_the_kubernetes_client(text: str) -> None:
    expected = oracle(text)
    assume(abs(expected) <= Decimal(10) ** 30)  # beyond: out of range, tested above
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("amount", "shown"),
    [(Decimal("208"), "208"), (Decimal("2.5E+2"), "250"), (Decimal("0.500"), "0.5")],
)
def test_formats_amounts_for_messages_without_exponents(amount: Decimal, shown: str) -> None:
    assert format_quantity(amount) == shown


# The policy reads quantities through pq.quantity, which remembers short strings.


@given(
    st.from_regex(r"[+-]?[0-9]{1,4}(\.[0-9]{0,3})?([KMGTPE]i|[numkMGTPE]|e[0-9])?", fullmatch=True)
)
def test_remembered_quantity_is_the_parsed_one(text: str) -> None:
    first, again = pq.quantity(text), pq.quantity(text)
    assert first == again == parse_quantity(text)


def test_remembered_quantities_stay_bounded() -> None:
    for n in range(pq.MEMO_SIZE + 10):
        pq.quantity(f"{n}Mi")
    assert pq._remembered_quantity.cache_info().currsize == pq.MEMO_SIZE
    long = "0" * pq.MEMO_LENGTH + "4"
    misses = pq._remembered_quantity.cache_info().misses
    assert pq.quantity(long) == Decimal(4)
    assert pq.whole_number(long) == 4
    assert pq._remembered_quantity.cache_info().misses == misses  # never looked up


def test_quantities_that_are_not_strings_are_parsed_as_such() -> None:
    assert pq.quantity(4) == Decimal(4)
    assert pq.quantity(True) is None
    assert pq.whole_number("1") == pq.whole_number(1) == 1
    assert pq.whole_number(True) is None
    assert pq.whole_number(["4"]) is None
    assert pq.quantity("four") is None
    assert pq.quantity("1e40") == Decimal("Infinity")


# Long quantities (more than 64 characters) are read with whole-text scans in C, and by their
# first 64 significant digits; the same grammar as the short path, and the same amount wherever
# it matters (its sign, whether it is whole, which side of a bound it is on).

long_digits = st.text("0123456789", min_size=40, max_size=200)
long_numbers = st.one_of(
    long_digits,
    st.builds("{}.{}".format, long_digits, long_digits),
    st.builds("{}.{}".format, st.text("0", max_size=150), long_digits),
    st.builds(".{}".format, long_digits),
    st.builds("{}.".format, long_digits),
)
long_quantities = st.builds(
    "{}{}{}".format, st.sampled_from(["", "+", "-"]), long_numbers, suffixes
).filter(lambda text: len(text) > quantity.LONG_NUMBER)


def rounded(amount: Decimal) -> Decimal:
    """To 60 significant digits: the first 64 are read exactly."""
    with localcontext() as context:
        context.prec = 60
        return +amount


@settings(max_examples=300, deadline=None)
@given(long_quantities)
def test_a_long_quantity_reads_as_the_kubernetes_client_reads_it(text: str) -> None:
    expected = oracle(text)
    assume(Decimal(10) ** -8000 < abs(expected) <= Decimal(10) ** 30 or expected == 0)
    parsed = parse_quantity(text)
    assert rounded(parsed) == rounded(expected)
    assert (parsed == parsed.to_integral_value()) == (expected == expected.to_integral_value())
    assert (parsed > 0) == (expected > 0)
    assert (parsed < 0) == (expected < 0)


@settings(max_examples=300, deadline=None)
@given(st.text("0123456789.+-eEKMGTPEimnuk ", min_size=65, max_size=120))
def test_a_long_text_is_a_quantity_exactly_when_the_grammar_says_so(text: str) -> None:
    grammar = quantity._QUANTITY.fullmatch(text) is not None
    try:
        parse_quantity(text)
        parsed = True
    except QuantityOutOfRange:
        parsed = True
    except QuantityError:
        parsed = False
    assert parsed == grammar


def test_quantities_of_three_million_characters_are_read_for_what_they_are() -> None:
    """Without a decimal overflow (it was a 500) and without a copy per digit."""
    assert parse_quantity("0" * 3_000_000 + "4") == 4
    assert parse_quantity("0." + "0" * 3_000_000 + "1") == Decimal("1e-9000")  # tiny, not 0
    with pytest.raises(QuantityOutOfRange):
        parse_quantity("9" * 3_000_000)
    with pytest.raises(QuantityError, match=r"^not a quantity: 'xxxx.{50,70}$"):
        parse_quantity("x" * 3_000_000)


def test_a_refused_quantity_is_named_by_its_first_characters_only() -> None:
    """Printing a 3 MB value whole took longer than reading it; an int of more than 4,300
    digits cannot be printed at all (Python's int-to-text limit)."""
    with pytest.raises(QuantityOutOfRange, match=r"^quantity out of range: '9{64}'\.\.\.$"):
        parse_quantity("9" * 3_000_000)
    with pytest.raises(
        QuantityOutOfRange, match=r"^quantity out of range: an integer of about 5001 digits$"
    ):
        parse_quantity(10**5000)
