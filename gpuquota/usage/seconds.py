"""Exact second counts from intervals, as SQL aggregates: reserved seconds (assignments
∩ charged window), failed seconds (health intervals), in-service seconds, per GPU class
in force at each second where asked (accounting.md: Inventory, Reservation, Chargeback).
They never read samples or rollups, so they stay exact for any past period."""

from django.db.models import DurationField, ExpressionWrapper, F, QuerySet, Sum, Value
from django.db.models.functions import Coalesce, Greatest, Least

from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import Gpu, GpuClassInterval, GpuHealthInterval
from gpuquota.reservations.models import Assignment

FAILED = GpuHealthInterval.State.FAILED
_CLASS = "gpu__class_history__"
_HEALTH = "gpu__health_history__"


def seconds_annotate(queryset: QuerySet, lo, hi) -> QuerySet:
    """Annotate `seconds_d` = hi − lo and keep rows where it is positive."""
    return queryset.annotate(_lo=lo, _hi=hi).filter(_hi__gt=F("_lo")).annotate(
        seconds_d=ExpressionWrapper(F("_hi") - F("_lo"), output_field=DurationField())
    )


def seconds_total(queryset: QuerySet, group: str | None = None) -> dict | int:
    """Σ seconds_d of annotated rows, as an int or {group value: int}."""
    if group is None:
        total = queryset.aggregate(total=Sum("seconds_d"))["total"]
        return int(total.total_seconds()) if total else 0
    rows = queryset.values(group).annotate(total=Sum("seconds_d")).order_by()
    return {row[group]: int(row["total"].total_seconds()) for row in rows}


def _charged_from(period: Period, *more) -> Greatest:
    """Reserved time starts at max(assigned_from, start, approved_at) and the period."""
    return Greatest(
        F("assigned_from"), F("reservation__start"),
        Coalesce(F("reservation__approved_at"), F("reservation__start")), Value(period.start),
        *more,
    )


def _until(field: str, period: Period):
    return Coalesce(F(field), Value(period.end))


def _assignments(period: Period, **filters) -> QuerySet:
    return Assignment.objects.filter(
        assigned_from__lt=period.end, assigned_until__gt=period.start, **filters
    )


def reserved_qs(period: Period, **filters) -> QuerySet:
    """Assignments annotated with their reserved seconds in the period."""
    return seconds_annotate(_assignments(period, **filters), _charged_from(period),
                            Least(F("assigned_until"), Value(period.end)))


def failed_reserved_qs(period: Period, **filters) -> QuerySet:
    """(assignment, failed interval) pairs annotated with their common seconds."""
    return seconds_annotate(
        _assignments(period, **{f"{_HEALTH}state": FAILED}, **filters),
        _charged_from(period, F(f"{_HEALTH}valid_from")),
        Least(F("assigned_until"), Value(period.end), _until(f"{_HEALTH}valid_until", period)),
    )


def in_service_qs(period: Period) -> QuerySet:
    """Physical GPUs annotated with their in-service seconds in the period."""
    return seconds_annotate(
        Gpu.objects.filter(parent__isnull=True),
        Greatest(F("commissioned_at"), Value(period.start)),
        Least(_until("retired_at", period), Value(period.end)),
    )


def failed_qs(period: Period) -> QuerySet:
    """Failed intervals of physical GPUs annotated with their in-service seconds."""
    return seconds_annotate(
        GpuHealthInterval.objects.filter(state=FAILED, gpu__parent__isnull=True),
        Greatest(F("valid_from"), F("gpu__commissioned_at"), Value(period.start)),
        Least(_until("valid_until", period), _until("gpu__retired_at", period),
              Value(period.end)),
    )


def in_service_seconds_by_class(*, period: Period) -> dict[int, int]:
    """In-service seconds per GPU class in force at each second."""
    return seconds_total(seconds_annotate(
        GpuClassInterval.objects.filter(gpu__parent__isnull=True),
        Greatest(F("valid_from"), F("gpu__commissioned_at"), Value(period.start)),
        Least(_until("valid_until", period), _until("gpu__retired_at", period),
              Value(period.end)),
    ), "gpu_class_id")


def failed_seconds_by_class(*, period: Period) -> dict[int, int]:
    """Failed in-service seconds per GPU class in force at each second."""
    return seconds_total(seconds_annotate(
        GpuHealthInterval.objects.filter(state=FAILED, gpu__parent__isnull=True,
                                         gpu__class_history__isnull=False),
        Greatest(F("valid_from"), F(f"{_CLASS}valid_from"), F("gpu__commissioned_at"),
                 Value(period.start)),
        Least(_until("valid_until", period), _until(f"{_CLASS}valid_until", period),
              _until("gpu__retired_at", period), Value(period.end)),
    ), f"{_CLASS}gpu_class_id")


def reserved_seconds(*, period: Period, group: str | None = None, **filters) -> int | dict:
    """Reserved seconds (accounting.md: assignments ∩ charged window ∩ period), exact,
    optionally grouped by an Assignment lookup (e.g. `reservation__team_id`); `filters`
    are Assignment lookups. Chargeback's `reserved` lines."""
    return seconds_total(reserved_qs(period, **filters), group)


def failed_reserved_seconds(*, period: Period, group: str | None = None,
                            **filters) -> int | dict:
    """Reserved seconds during which the assigned GPU was failed: the `failure_credit`."""
    return seconds_total(failed_reserved_qs(period, **filters), group)


#: The group name of the GPU class in force in `reserved_by_class_qs` rows.
CLASS_IN_FORCE = f"{_CLASS}gpu_class_id"


def reserved_by_class_qs(period: Period, **filters) -> QuerySet:
    """(assignment, class interval) pairs annotated with their reserved seconds in the
    period; group them by `CLASS_IN_FORCE`."""
    return seconds_annotate(
        _assignments(period, **{f"{_CLASS}isnull": False}, **filters),
        _charged_from(period, F(f"{_CLASS}valid_from")),
        Least(F("assigned_until"), Value(period.end), _until(f"{_CLASS}valid_until", period)),
    )


def reserved_seconds_by_class(*, period: Period, **filters) -> dict[int, int]:
    """Reserved seconds per GPU class in force at each second (a GPU reclassified while
    assigned prices its later seconds in its new class); `filters`: Assignment lookups."""
    return seconds_total(reserved_by_class_qs(period, **filters), CLASS_IN_FORCE)


def failed_reserved_seconds_by_class(*, period: Period, **filters) -> dict[int, int]:
    """Failed reserved seconds per GPU class in force at each second."""
    return seconds_total(seconds_annotate(
        _assignments(period, **{f"{_HEALTH}state": FAILED, f"{_CLASS}isnull": False},
                     **filters),
        _charged_from(period, F(f"{_HEALTH}valid_from"), F(f"{_CLASS}valid_from")),
        Least(F("assigned_until"), Value(period.end), _until(f"{_HEALTH}valid_until", period),
              _until(f"{_CLASS}valid_until", period)),
    ), f"{_CLASS}gpu_class_id")


def reserved_in_class_qs(period: Period, *, gpu_class, **filters) -> QuerySet:
    """Assignments annotated with their reserved seconds while the GPU was of `gpu_class`."""
    return seconds_annotate(
        _assignments(period, **{f"{_CLASS}gpu_class": gpu_class}, **filters),
        _charged_from(period, F(f"{_CLASS}valid_from")),
        Least(F("assigned_until"), Value(period.end), _until(f"{_CLASS}valid_until", period)),
    )
