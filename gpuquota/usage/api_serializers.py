"""Shapes of the usage API (`usage.api`): the period query, and the figures of
'Utilization versus allocation' in the glossary's units. Seconds are integers,
fractions and percentages decimal strings (rounded half up once, for display)."""

from fractions import Fraction

from rest_framework import serializers

from gpuquota.core.api_fields import AwareDateTimeField, ChoiceField
from gpuquota.reservations.models import Reservation
from gpuquota.usage.daily import DayUsage
from gpuquota.usage.figures import FleetFigures, UsageFigures, display_decimal
from gpuquota.usage.selectors import ReservationUsage

BY_CHOICES = [("period", "The period's figures only"), ("day", "Also per UTC day")]
SHARE_NOTE = "Integer seconds (a window shared by n teams gives each 1/n, rounded half up)."


class UsageQuerySerializer(serializers.Serializer):
    start = AwareDateTimeField(help_text="Inclusive, whole seconds, with an offset or Z.")
    end = AwareDateTimeField(help_text="Exclusive; a later end than now is clipped to now "
                             "(figures to date). At most 366 days after the start.")
    by = ChoiceField(choices=BY_CHOICES, required=False, default="period",
                     help_text="`day`: add reserved versus busy seconds per UTC day.")


def share_seconds(value: Fraction | int) -> int:
    return int(display_decimal(value, "1"))


def _fraction(value: Fraction | None) -> str | None:
    return None if value is None else str(display_decimal(value, "0.0001"))


def usage_figures_data(figures: UsageFigures, *, lent: bool = False) -> dict:
    """Reserved time and what the agents reported inside it (failed time included);
    with `lent`, the time the team's GPUs were lent (a team's and its reservations')."""
    sums = figures.sums
    mean = figures.mean_util_gpu
    return {
        "reserved_s": figures.reserved_s, "failed_reserved_s": figures.failed_reserved_s,
        "covered_s": share_seconds(sums.covered_s), "busy_s": share_seconds(sums.busy_s),
        "utilization": _fraction(figures.utilization) if sums.covered_s else None,
        "coverage": _fraction(figures.coverage) if figures.reserved_s else None,
        "mean_util_gpu_percent": None if mean is None else str(display_decimal(mean)),
        **({"lent_s": figures.lent_s, "lent_busy_s": share_seconds(figures.lent_busy_s)}
           if lent else {}),
    }


def fleet_figures_data(figures: FleetFigures) -> dict:
    """In-service, non-failed GPU time, busy time in it (reserved or not), and the
    reserved figures."""
    return {
        "in_service_s": figures.in_service_s, "failed_s": figures.failed_s,
        "available_s": figures.available_s, "covered_s": share_seconds(figures.sums.ok_covered_s),
        "busy_s": share_seconds(figures.sums.ok_busy_s),
        "utilization": _fraction(figures.utilization) if figures.sums.ok_covered_s else None,
        "reserved": usage_figures_data(figures.reserved),
    }


def days_data(days: list[DayUsage] | None) -> list[dict] | None:
    if days is None:
        return None
    return [{"day": d.day, "reserved_s": d.reserved_s, "busy_s": share_seconds(d.busy_s),
             "utilization": _fraction(d.utilization)} for d in days]


def reservation_usage_data(row: ReservationUsage) -> dict:
    r = row.reservation
    return {"id": r.id, "gpu_class": r.gpu_class.name, "count": r.count, "start": r.start,
            "end": r.end, "effective_end": r.effective_end, "status": r.status,
            "figures": usage_figures_data(row.figures, lent=True)}


class UsageFiguresSerializer(serializers.Serializer):
    reserved_s = serializers.IntegerField(help_text="Reserved GPU-seconds (glossary: reserved).")
    failed_reserved_s = serializers.IntegerField(
        help_text="Reserved GPU-seconds on failed GPUs (credited on statements).")
    covered_s = serializers.IntegerField(help_text="Reserved seconds the agents reported on.")
    busy_s = serializers.IntegerField(
        help_text="Covered seconds at or above the busy threshold.")
    utilization = serializers.CharField(
        allow_null=True, help_text="busy_s / reserved_s, 4 places; null: no data.")
    coverage = serializers.CharField(
        allow_null=True, help_text="covered_s / reserved_s, 4 places; null: nothing reserved.")
    mean_util_gpu_percent = serializers.CharField(
        allow_null=True, help_text="Time-weighted mean GPU utilization over covered seconds, "
        "percent, 2 places; null: no data.")
    lent_s = serializers.IntegerField(
        required=False, help_text="Teams and reservations only: reserved seconds lent to "
        "other teams' preemptible work, failed time left out (still reserved and charged).")
    lent_busy_s = serializers.IntegerField(
        required=False, help_text="Teams and reservations only: borrowed busy seconds on "
        "the lent GPUs (others' work, credited on statements); never part of busy_s.")


class FleetFiguresSerializer(serializers.Serializer):
    in_service_s = serializers.IntegerField(help_text="GPU-seconds in service.")
    failed_s = serializers.IntegerField(help_text="In-service GPU-seconds while failed.")
    available_s = serializers.IntegerField(help_text="in_service_s - failed_s.")
    covered_s = serializers.IntegerField(help_text="Non-failed seconds the agents reported on.")
    busy_s = serializers.IntegerField(help_text="Non-failed busy seconds, reserved or not.")
    utilization = serializers.CharField(
        allow_null=True, help_text="Fleet utilization: busy_s / available_s, 4 places; "
        "null: no data.")
    reserved = UsageFiguresSerializer()


class DaySerializer(serializers.Serializer):
    day = serializers.DateField(help_text="A UTC day, clipped to the period.")
    reserved_s = serializers.IntegerField()
    busy_s = serializers.IntegerField(help_text="Busy seconds inside reserved time.")
    utilization = serializers.CharField(
        allow_null=True, help_text="busy_s / reserved_s, 4 places; null: nothing reserved.")


class ClassUsageSerializer(serializers.Serializer):
    gpu_class = serializers.CharField(help_text="The class in force at each second.")
    figures = FleetFiguresSerializer()
    days = DaySerializer(many=True, allow_null=True, help_text="by=day only (else null).")


class UnreservedSerializer(serializers.Serializer):
    team = serializers.CharField(help_text="The owner team's name, or Unattributed.")
    team_slug = serializers.CharField(allow_null=True,
                                      help_text="The owner team's slug; null: unattributed.")
    busy_s = serializers.IntegerField(help_text=SHARE_NOTE)


class _PeriodSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField(help_text="The end used: clipped to now.")
    busy_threshold_percent = serializers.CharField(
        help_text="A covered second is busy at or above this mean GPU utilization.")
    days = DaySerializer(many=True, allow_null=True, help_text="by=day only (else null).")


class FleetUsageSerializer(_PeriodSerializer):
    fleet = FleetFiguresSerializer()
    classes = ClassUsageSerializer(many=True)
    unreserved = UnreservedSerializer(
        many=True, allow_null=True,
        help_text="Unreserved busy seconds per owner team, largest first; admins only "
        "(null for others, as on the utilization page).")


class ReservationUsageSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    gpu_class = serializers.CharField()
    count = serializers.IntegerField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    effective_end = serializers.DateTimeField(allow_null=True)
    status = serializers.ChoiceField(Reservation.Status.choices)
    figures = UsageFiguresSerializer()


class TeamUsageSerializer(_PeriodSerializer):
    team = serializers.CharField(help_text="The team's slug.")
    figures = UsageFiguresSerializer(help_text="Over all the team's reservations.")
    reservations = ReservationUsageSerializer(many=True)
