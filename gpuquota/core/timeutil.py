"""Periods and time arithmetic in UTC (accounting.md: Time and numbers)."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpuquota.core.errors import DomainError


@dataclass(frozen=True)
class Period:
    """A half-open UTC interval [start, end)."""

    start: datetime
    end: datetime

    def __post_init__(self):
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("a period's bounds must be aware datetimes")
        if self.end < self.start:
            raise ValueError("a period cannot end before it starts")

    @classmethod
    def month(cls, year: int, month: int) -> "Period":
        start = datetime(year, month, 1, tzinfo=UTC)
        end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
        return cls(start, end)

    @classmethod
    def parse_month(cls, text: str) -> "Period":
        """`YYYY-MM` → that calendar month in UTC; ValueError otherwise."""
        try:
            year, month = (int(part) for part in text.split("-"))
            return cls.month(year, month)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"expected a month as YYYY-MM, not {text!r}") from exc

    @property
    def seconds(self) -> int:
        return int((self.end - self.start).total_seconds())

    def clip(self, start: datetime, end: datetime | None) -> int:
        """Seconds of [start, end) inside this period (an open end is unbounded)."""
        lo = max(start, self.start)
        hi = self.end if end is None else min(end, self.end)
        return max(0, int((hi - lo).total_seconds()))

    def to_date(self, now: datetime) -> "Period":
        """This period clipped at `now` (a period not yet ended is 'to date')."""
        return Period(self.start, max(self.start, min(self.end, now)))


def overlap_seconds(
    a_start: datetime, a_end: datetime | None, b_start: datetime, b_end: datetime | None
) -> int:
    """Seconds in common of two half-open intervals; None ends are unbounded."""
    lo = max(a_start, b_start)
    ends = [e for e in (a_end, b_end) if e is not None]
    if not ends:
        raise ValueError("both intervals are unbounded")
    hi = min(ends)
    return max(0, int((hi - lo).total_seconds()))


def hour_floor(value: datetime) -> datetime:
    return value.replace(minute=0, second=0, microsecond=0)


def hours_between(start: datetime, end: datetime) -> list[datetime]:
    """Every UTC hour that [start, end) touches, as its start instant."""
    hours = []
    hour = hour_floor(start)
    while hour < end:
        hours.append(hour)
        hour += timedelta(hours=1)
    return hours


def instant_text(value: datetime | None, *, seconds: bool = False, empty: str = "—") -> str:
    """An instant as every page shows it: `2026-12-01 16:00` in the active (the viewer's)
    time zone; with seconds where they matter (events). The one format of the product's
    pages and of the date-and-time inputs."""
    from django.utils import timezone

    if value is None:
        return empty
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    return local.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def month_of(*, text: str | None, now: datetime) -> Period:
    """The calendar month named `YYYY-MM` (default: the current one); a month that has
    not begun is refused: it has no figures yet."""
    current = Period.month(now.year, now.month)
    if not text:
        return current
    try:
        month = Period.parse_month(text)
    except ValueError as exc:
        raise DomainError("Pick a month as YYYY-MM, e.g. 2026-11.", field="month") from exc
    if month.start > current.start:
        raise DomainError(f"{month.start:%B %Y} has not begun: it has no figures yet.",
                          field="month")
    return month
