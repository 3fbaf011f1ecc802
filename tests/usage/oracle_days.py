"""What the day rows must hold: the hourly rollup rows summed per GPU, UTC day and bucket
(less the rate card), computed here by the ORM from the hourly rows."""

from datetime import UTC

from django.db.models import Count, Sum
from django.db.models.functions import TruncDate

from gpuquota.usage.models import GpuDayUsage, GpuHourUsage
from gpuquota.usage.rollup_days import KEY, SUMS


def day_rows_stored() -> set[tuple]:
    return set(GpuDayUsage.objects.values_list("day", *KEY, *SUMS))


def day_rows_of_the_hours() -> set[tuple]:
    return set(GpuHourUsage.objects.annotate(day=TruncDate("hour", tzinfo=UTC))
               .values("day", *KEY).order_by()
               .annotate(hours=Count("id"), covered=Sum("covered_s"), busy=Sum("busy_s"),
                         util=Sum("util_weighted"))
               .values_list("day", *KEY, "hours", "covered", "busy", "util"))


def assert_day_rows_are_the_hours_summed() -> None:
    stored, expected = day_rows_stored(), day_rows_of_the_hours()
    assert stored == expected, (f"day rows not in the hours: {sorted(stored - expected)}; "
                                f"missing: {sorted(expected - stored)}")
