"""Lent time of reservations (accounting.md, Lending, and Utilization versus allocation):
`lent_s`, the seconds of loans inside the charged assignment that are not failed (SQL
aggregates over loan and health intervals, exact for any period), and `lent_busy_s`, the
borrowed busy seconds of the lent GPUs, attributed or not (the rollups' `borrowed`
buckets, failed time left out), per reservation."""

from fractions import Fraction

from django.db.models import F, Q, QuerySet, Value
from django.db.models.functions import Coalesce, Greatest, Least

from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.reservations.models import Loan
from gpuquota.usage.seconds import seconds_annotate, seconds_total

_RESERVATION = "assignment__reservation__"
_HEALTH = "gpu__health_history__"


def _loans(period: Period, filters: dict) -> QuerySet:
    return Loan.objects.filter(
        Q(returned_at__isnull=True) | Q(returned_at__gt=period.start),
        lent_from__lt=period.end, assignment__assigned_until__gt=period.start, **filters)


def _bounds(period: Period, *more_lows, more_highs=()) -> tuple:
    low = Greatest(F("lent_from"), F("assignment__assigned_from"), F(f"{_RESERVATION}start"),
                   Coalesce(F(f"{_RESERVATION}approved_at"), F(f"{_RESERVATION}start")),
                   Value(period.start), *more_lows)
    high = Least(Coalesce(F("returned_at"), Value(period.end)), F("assignment__assigned_until"),
                 Value(period.end), *more_highs)
    return low, high


def lent_seconds(*, period: Period, group: str = "assignment__reservation_id",
                 **filters) -> dict[int, int]:
    """Lent, non-failed seconds per reservation id (or per `group`, a Loan lookup such as
    `assignment__reservation__team_id`); `filters` are Loan lookups (e.g.
    `assignment__reservation__team=team`)."""
    total = seconds_total(seconds_annotate(_loans(period, filters), *_bounds(period)), group)
    if not total:
        return {}  # nothing lent: no failed time to look for
    failed_loans = _loans(period, {**filters, f"{_HEALTH}state": GpuHealthInterval.State.FAILED})
    failed = seconds_total(seconds_annotate(failed_loans, *_bounds(
        period, F(f"{_HEALTH}valid_from"),
        more_highs=(Coalesce(F(f"{_HEALTH}valid_until"), Value(period.end)),))), group)
    return {key: seconds - failed.get(key, 0) for key, seconds in total.items()
            if seconds - failed.get(key, 0)}


def lent_gpu_ids(*, reservation_ids: set[int]):
    """A function (start, end) -> the GPUs of these reservations lent in [start, end):
    the GPUs whose partial edge hours must be computed for their borrowed seconds."""
    def ids(start, end) -> list:
        return list(_loans(Period(start, end), {"assignment__reservation_id__in": reservation_ids})
                    .values_list("gpu_id", flat=True).distinct())
    return ids


def lent_busy_fold(rows: list[dict], reservation_ids: set[int]) -> dict[int, Fraction]:
    """Borrowed busy seconds per reservation from `borrowed` rollup rows (all owners of a
    split window together make its whole seconds)."""
    busy: dict[int, Fraction] = {}
    for row in rows:
        rid = row["reservation_id"]
        if rid in reservation_ids and row["busy_s"]:
            busy[rid] = busy.get(rid, Fraction(0)) + Fraction(int(row["busy_s"]),
                                                             row["split_ways"])
    return busy
