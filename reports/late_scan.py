"""Late usage of every approved month, not only last month's (accounting.md, Closing a
period): data recorded after approval for an older month (a back-filled reservation, a
health interval entered by hand) is found by a daily scan, which prices each approved
month of the last `GPUQUOTA_LATE_USAGE_MONTHS` again and keeps what is still to settle per
statement (`LateUsageCheck`); the review page lists those, and the statement's page shows
its late usage as the data says now."""

from datetime import date, datetime
from decimal import Decimal

from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from gpuquota.core.fields import whole_second
from reports import conf
from reports.models import LateUsageCheck, Statement
from reports.selectors import late_usage_month, month_before


def _months_back(now: datetime, count: int) -> list[date]:
    month, months = now.date().replace(day=1), []
    for _ in range(count):
        month = month_before(month)
        months.append(month)
    return months


def late_usage_scan(*, now: datetime | None = None) -> dict[str, int]:
    """Price every approved or sent statement of the last N months again (one pricing pass
    per month) and record what each still has to settle; running it twice records the
    same. Returns, per month, how many statements have something to settle."""
    now = whole_second(now or timezone.now())
    found = {}
    for month in _months_back(now, conf.late_usage_scan_months()):
        lates = late_usage_month(month=month)
        with transaction.atomic():
            for late in lates.values():
                LateUsageCheck.objects.update_or_create(
                    statement=late.statement,
                    defaults={"difference": late.difference, "error": " ".join(late.errors),
                              "checked_at": now})
        found[f"{month:%Y-%m}"] = sum(1 for late in lates.values()
                                      if late.difference or late.errors)
    return found


def late_usage_check_settled(*, statement: Statement, amount: Decimal) -> None:
    """An adjustment of `amount` now settles part of the statement's late usage: what
    the last scan found still to settle shrinks by as much."""
    LateUsageCheck.objects.filter(statement=statement).update(
        difference=F("difference") - amount)


def late_usage_checks_pending(*, before: date) -> QuerySet[LateUsageCheck]:
    """The scanned statements of months before `before` with late usage still to settle,
    or that could not be priced, oldest month first."""
    return (LateUsageCheck.objects.filter(statement__month__lt=before)
            .filter(~Q(difference=0) | ~Q(error=""))
            .select_related("statement__team")
            .order_by("statement__month", "statement__team_name"))
