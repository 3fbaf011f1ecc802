"""Settings of the reservations app, read at call time so tests can override them."""

import os
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def booking_horizon_days() -> int:
    """How many days ahead a reservation may reach (BOOKING_HORIZON_DAYS, default 400)."""
    raw = getattr(settings, "BOOKING_HORIZON_DAYS", None) or os.environ.get(
        "BOOKING_HORIZON_DAYS") or 400
    try:
        days = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"BOOKING_HORIZON_DAYS must be an integer, not {raw!r}") from exc
    if days < 1:
        raise ImproperlyConfigured(f"BOOKING_HORIZON_DAYS must be at least 1, not {days}")
    return days


def booking_horizon_end(*, now: datetime) -> datetime:
    """The last instant a reservation may reach: `now` plus the booking horizon."""
    return now + timedelta(days=booking_horizon_days())
