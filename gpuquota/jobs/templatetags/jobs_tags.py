from django import template

register = template.Library()


@register.filter
def gpu_hours(seconds: int | None) -> str:
    """GPU-seconds as GPU-hours with two decimals ("0.00" for none)."""
    return f"{(seconds or 0) / 3600:.2f}"


@register.filter
def pct(value) -> str:
    """A percentage with no decimal, or a dash."""
    return "—" if value is None else f"{float(value):.0f} %"
