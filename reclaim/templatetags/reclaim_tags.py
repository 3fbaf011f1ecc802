from datetime import timedelta

from django import template

register = template.Library()

ACTIONS = {
    "reclaim.recommend": "recommended",
    "reclaim.accept": "accepted",
    "reclaim.dismiss": "dismissed",
    "reclaim.object": "objected",
    "reclaim.uphold": "objection overruled",
    "reclaim.withdraw": "withdrawn",
    "reclaim.release": "released",
    "reclaim.self_release": "released by the team",
    "reclaim.close": "closed",
    "reclaim.exempt": "exempted",
    "reclaim.exemption_update": "exemption changed",
    "reclaim.exemption_end": "exemption ended",
    "reservation.reclaim": "GPUs ended",
}


@register.filter
def audit_action(action: str) -> str:
    """An audit entry's action in words."""
    return ACTIONS.get(action, action)


@register.filter
def duration(value: timedelta | None) -> str:
    """A policy duration in the largest whole units: '7 days', '4 h', '90 min'."""
    if value is None:
        return "—"
    seconds = int(value.total_seconds())
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if unit == 'day' and n != 1 else ''}"
    return f"{seconds} s"
