"""How a statement line reads to people (its page, the PDF, the mail), beside the export's
figures, which stay as they are: a line of a few seconds is kept (a line is left out only
when its seconds are 0) and must not read as a charge for nothing (accounting.md, A line
of a few seconds)."""

from decimal import Decimal
from fractions import Fraction

from gpuquota.usage.figures import display_decimal

UNDER_A_HUNDREDTH = "< 0.01"
UNDER_HALF_A_CENT = "less than half a cent: each line is rounded once, to the cent"


def hours_under_a_hundredth(seconds: int | None) -> bool:
    """The line has seconds, yet its hours round to 0.00 (under 18 s): shown as `< 0.01`."""
    return bool(seconds) and display_decimal(Fraction(seconds, 3600)) == 0


def amount_under_half_a_cent(seconds: int | None, amount: Decimal | str) -> bool:
    """The line has seconds, yet its amount rounds to 0.00: it says why."""
    return bool(seconds) and Decimal(amount) == 0
