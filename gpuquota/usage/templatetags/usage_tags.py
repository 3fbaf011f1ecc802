from fractions import Fraction

from django import template

from gpuquota.usage.conf import busy_util_percent
from gpuquota.usage.figures import display_decimal

register = template.Library()


@register.filter
def pct(value) -> str:
    """An exact ratio as a percentage, ROUND_HALF_UP to one decimal."""
    if value is None:
        return "—"
    return f"{display_decimal(Fraction(value) * 100, '0.1')}%"


@register.filter
def pct_width(value) -> str:
    """A ratio as a CSS width, capped at 100%."""
    if value is None:
        return "0%"
    return f"{min(100, float(value) * 100):.1f}%"


@register.filter
def gib(value) -> str:
    if value is None:
        return "—"
    return f"{value / 2**30:.1f} GiB"


@register.filter
def hours(seconds) -> str:
    if seconds is None:
        return "—"
    return str(display_decimal(Fraction(seconds) / 3600))


@register.filter
def team_label(team_id, visible) -> str:
    """A team name only when the viewer may see that team."""
    return "visible" if visible is None or team_id in visible else "hidden"


@register.filter
def util_pct(value) -> str:
    """A utilization already in percent (0..100), ROUND_HALF_UP to one decimal."""
    return pct(None if value is None else Fraction(value) / 100)


@register.simple_tag
def busy_threshold() -> str:
    """The busy threshold in force (BUSY_UTIL_PERCENT), as shown next to busy figures."""
    return f"{busy_util_percent().normalize():f}"
