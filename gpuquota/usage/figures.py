"""Exact sums of rollup buckets and the figures of 'Utilization versus allocation'.

Seconds shares are `Fraction`s (a window split between n teams gives each 1/n of
its seconds); they are divided once, when a figure is shown or priced.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction


def display_decimal(value: Fraction | int, places: str = "0.01") -> Decimal:
    """ROUND_HALF_UP of an exact value, for display only."""
    value = Fraction(value)
    exact = Decimal(value.numerator) / Decimal(value.denominator) if value.denominator != 1 \
        else Decimal(value.numerator)
    return exact.quantize(Decimal(places), rounding=ROUND_HALF_UP)


@dataclass
class Sums:
    """Covered, busy and util-weighted seconds; `ok_` excludes failed time (never
    charged, and outside the fleet's non-failed seconds)."""

    covered_s: Fraction = Fraction(0)
    busy_s: Fraction = Fraction(0)
    util_weighted: Fraction = Fraction(0)
    ok_covered_s: Fraction = Fraction(0)
    ok_busy_s: Fraction = Fraction(0)

    def add(self, *, covered_s, busy_s, util_weighted, failed: bool, split_ways: int) -> None:
        share = Fraction(1, split_ways)
        self.covered_s += Fraction(covered_s) * share
        self.busy_s += Fraction(busy_s) * share
        self.util_weighted += Fraction(Decimal(util_weighted)) * share
        if not failed:
            self.ok_covered_s += Fraction(covered_s) * share
            self.ok_busy_s += Fraction(busy_s) * share

    def __iadd__(self, other: "Sums") -> "Sums":
        self.covered_s += other.covered_s
        self.busy_s += other.busy_s
        self.util_weighted += other.util_weighted
        self.ok_covered_s += other.ok_covered_s
        self.ok_busy_s += other.ok_busy_s
        return self


@dataclass
class UsageFigures:
    """Reserved seconds (from assignments) against what the agents reported in them:
    covered and busy seconds inside reserved assignments, failed time included (it is
    credited on statements, not hidden here; accounting.md, Utilization)."""

    reserved_s: int = 0
    failed_reserved_s: int = 0
    sums: Sums = field(default_factory=Sums)
    #: loan seconds that are not failed, and the borrowed busy seconds in them (Lending):
    #: beside `busy_s`, which never holds borrowed seconds
    lent_s: int = 0
    lent_busy_s: Fraction = Fraction(0)

    @property
    def lent_hours(self) -> Decimal:
        return display_decimal(Fraction(self.lent_s, 3600))

    @property
    def lent_busy_hours(self) -> Decimal:
        return display_decimal(Fraction(self.lent_busy_s) / 3600)

    @property
    def reserved_hours(self) -> Decimal:
        return display_decimal(Fraction(self.reserved_s, 3600))

    @property
    def covered_hours(self) -> Decimal:
        return display_decimal(self.sums.covered_s / 3600)

    @property
    def busy_hours(self) -> Decimal:
        return display_decimal(self.sums.busy_s / 3600)

    @property
    def utilization(self) -> Fraction:
        return self.sums.busy_s / self.reserved_s if self.reserved_s else Fraction(0)

    @property
    def coverage(self) -> Fraction:
        return self.sums.covered_s / self.reserved_s if self.reserved_s else Fraction(0)

    @property
    def mean_util_gpu(self) -> Fraction | None:
        if not self.sums.covered_s:
            return None
        return self.sums.util_weighted / self.sums.covered_s

    def as_dict(self) -> dict:
        """Decimal strings as the statement export shows them."""
        mean = self.mean_util_gpu
        return {
            "reserved_hours": str(self.reserved_hours),
            "covered_hours": str(self.covered_hours),
            "busy_hours": str(self.busy_hours),
            "utilization": str(display_decimal(self.utilization, "0.0001")),
            "coverage": str(display_decimal(self.coverage, "0.0001")),
            "mean_util_gpu": None if mean is None else str(display_decimal(mean)),
        }


@dataclass
class FleetFigures:
    """Fleet utilization: busy seconds / in-service, non-failed GPU seconds."""

    in_service_s: int = 0
    failed_s: int = 0
    sums: Sums = field(default_factory=Sums)
    reserved: UsageFigures = field(default_factory=UsageFigures)

    @property
    def available_s(self) -> int:
        return max(0, self.in_service_s - self.failed_s)

    @property
    def utilization(self) -> Fraction:
        return self.sums.ok_busy_s / self.available_s if self.available_s else Fraction(0)

    @property
    def busy_hours(self) -> Decimal:
        return display_decimal(self.sums.ok_busy_s / 3600)

    @property
    def available_hours(self) -> Decimal:
        return display_decimal(Fraction(self.available_s, 3600))

    @property
    def coverage(self) -> Fraction:
        """How much of the in-service, non-failed time the agents reported: the fleet
        utilization's denominator that is measured, not assumed idle."""
        return self.sums.ok_covered_s / self.available_s if self.available_s else Fraction(0)

    @property
    def covered_hours(self) -> Decimal:
        return display_decimal(self.sums.ok_covered_s / 3600)

    @property
    def reported_utilization(self) -> Fraction | None:
        """Busy seconds ÷ reported seconds: how busy the time the agents saw was."""
        return self.sums.ok_busy_s / self.sums.ok_covered_s if self.sums.ok_covered_s else None


def sums_by(rows, key) -> dict:
    """Fold rollup rows (or buckets as dicts) into Sums per key(row)."""
    result: dict = defaultdict(Sums)
    for row in rows:
        result[key(row)].add(
            covered_s=row["covered_s"], busy_s=row["busy_s"], util_weighted=row["util_weighted"],
            failed=row["failed"], split_ways=row["split_ways"],
        )
    return result
