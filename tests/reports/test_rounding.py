"""One division per line, rounded half away from zero from an exact numerator; rates as
stored (accounting.md: Time and numbers, Statement export)."""

from decimal import Decimal
from fractions import Fraction

import pytest

from reports.export import hours_text, rate_text
from reports.pricing import line_amount, round_half_up_cents, round_half_up_int


@pytest.mark.parametrize("value, cents", [
    (Fraction(1, 200), "0.01"), (Fraction(-1, 200), "-0.01"),
    (Fraction(1, 200) - Fraction(1, 10**12), "0.00"),
    (Fraction(2, 3), "0.67"), (Fraction(-2, 3), "-0.67"), (Fraction(0), "0.00"),
    (Fraction(1087625, 1000), "1087.63"), (Fraction(-89375, 10000), "-8.94"),
])
def test_round_half_up_cents(value, cents):
    assert round_half_up_cents(value) == Decimal(cents)
    assert str(round_half_up_cents(value)) == cents


def test_shares_stay_exact_until_the_amount():
    # a tenth of 7 s at 1800/h is 0.35: rounding the share to 1 s first would give 0.50
    assert line_amount(Fraction(7, 10) * 1800) == Decimal("0.35")
    assert round_half_up_int(Fraction(7, 2)) == 4 and round_half_up_int(Fraction(-7, 2)) == -4
    assert line_amount(Fraction(3601, 3) * Fraction(Decimal("3.17"))) == Decimal("1.06")


@pytest.mark.parametrize("rate, text", [
    ("2.5000", "2.50"), ("0.8000", "0.80"), ("1.2345", "1.2345"), ("1.2300", "1.23"),
    ("10.0000", "10.00"), ("0.0050", "0.005"), ("0.0000", "0.00"),
])
def test_rates_as_stored_with_at_least_two_places(rate, text):
    assert rate_text(Decimal(rate)) == text


def test_hours_are_rounded_for_display_only():
    assert [hours_text(s) for s in (1800, 1200, 18, 17, 5356800)] == [
        "0.50", "0.33", "0.01", "0.00", "1488.00"]
