from decimal import Decimal
from fractions import Fraction

from django import template

from gpuquota.usage.figures import display_decimal
from reports.export import hours_text, rate_text
from reports.lines_shown import (
    UNDER_A_HUNDREDTH,
    UNDER_HALF_A_CENT,
    amount_under_half_a_cent,
    hours_under_a_hundredth,
)

register = template.Library()


@register.filter
def money(value) -> str:
    """A Decimal amount grouped by thousands with two places: -1234.5 → -1,234.50."""
    if value is None or value == "":
        return "—"
    amount = Decimal(value)
    return f"-{abs(amount):,.2f}" if amount < 0 else f"{amount:,.2f}"


@register.filter
def signed_pct(value) -> str:
    """A change ratio as a signed percentage, one decimal: 0.315 → +31.5%."""
    if value is None:
        return "—"
    percent = display_decimal(Fraction(value) * 100, "0.1")
    return f"+{percent}%" if percent > 0 else f"{percent}%"


@register.filter
def rate(value) -> str:
    """A rate as the export shows it: as stored, with at least two places."""
    return "—" if value is None else rate_text(Decimal(value))


@register.filter
def line_hours(seconds) -> str:
    """A line's hours: two places, `< 0.01` for a few seconds (never 0.00 for some)."""
    if seconds is None:
        return "—"
    return UNDER_A_HUNDREDTH if hours_under_a_hundredth(seconds) else hours_text(seconds)


@register.filter
def under_half_a_cent(amount, seconds) -> str:
    """Why a line with seconds costs 0.00 (`line.amount|under_half_a_cent:line.seconds`);
    '' for every other line."""
    return UNDER_HALF_A_CENT if amount_under_half_a_cent(seconds, amount) else ""
