"""Instants as people read them: in the viewer's time zone, with the year only when it
is not the current one ("Tue 01 Jan 2030 09:00", "Wed 02 Dec 09:00")."""

from datetime import date, datetime

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format

register = template.Library()


@register.filter
def when(value: datetime | None, empty: str = "—") -> str:
    """A date and time, with the year when it is not this year."""
    if value is None:
        return empty
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    same_year = local.year == timezone.localdate().year
    return date_format(local, "D d M H:i" if same_year else "D d M Y H:i")


@register.filter
def day(value: date | datetime | None, empty: str = "—") -> str:
    """A date, with the year when it is not this year."""
    if value is None:
        return empty
    if isinstance(value, datetime):
        value = timezone.localtime(value).date() if timezone.is_aware(value) else value.date()
    same_year = value.year == timezone.localdate().year
    return date_format(value, "D d M" if same_year else "D d M Y")
