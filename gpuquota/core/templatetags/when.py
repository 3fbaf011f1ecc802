"""Instants as every page shows them: one format, `2026-12-01 16:00`, in the viewer's time
zone (the footer names it), the same that the date-and-time inputs take; with seconds
where they matter (events, health intervals). Dates alone: `2026-12-01`."""

from datetime import date, datetime

from django import template
from django.utils import timezone

from gpuquota.core.timeutil import instant_text

register = template.Library()


@register.filter
def when(value: datetime | None, empty: str = "—") -> str:
    """A date and time: `2026-12-01 16:00` in the viewer's time zone."""
    return instant_text(value, empty=empty)


@register.filter
def when_seconds(value: datetime | None, empty: str = "—") -> str:
    """The same to the second: `2026-12-01 16:00:05`."""
    return instant_text(value, seconds=True, empty=empty)


@register.filter
def day(value: date | datetime | None, empty: str = "—") -> str:
    """A date: `2026-12-01` (of the viewer's time zone, for an instant)."""
    if value is None:
        return empty
    if isinstance(value, datetime):
        value = timezone.localtime(value).date() if timezone.is_aware(value) else value.date()
    return value.isoformat()


@register.filter
def seconds_length(seconds: int | None, empty: str = "—") -> str:
    """A length of time with its units: `45 s`, `19 min`, `1 h 19 min`, `3 d 2 h`."""
    if seconds is None:
        return empty
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, hours = seconds // 60, seconds // 3600
    if hours < 1:
        return f"{minutes} min"
    if hours < 24:
        return f"{hours} h {minutes % 60} min" if minutes % 60 else f"{hours} h"
    return f"{hours // 24} d {hours % 24} h" if hours % 24 else f"{hours // 24} d"
