"""Server-rendered SVG charts (no JavaScript, no CDN): small, testable, printable."""

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from html import escape

from django.utils.safestring import SafeString, mark_safe

from gpuquota.core.timeutil import instant_text

WIDTH, HEIGHT, PAD_L, PAD_B, PAD_T = 720, 180, 44, 22, 10


def svg_bar_chart(*, points: Sequence[tuple[datetime, float | Decimal | None]], max_value: float,
                  title: str, unit: str = "%", color: str = "#3b6fe0") -> SafeString:
    """One bar per point (None: no data, drawn as a gap); y axis from 0 to max_value."""
    plot_w, plot_h = WIDTH - PAD_L - 8, HEIGHT - PAD_B - PAD_T
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'class="chart" role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>',
    ]
    for fraction in (0, 0.5, 1):
        y = PAD_T + plot_h * (1 - fraction)
        label = f"{max_value * fraction:.0f}{unit}"
        parts.append(f'<line x1="{PAD_L}" x2="{WIDTH - 8}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#e3e7ee"/><text x="{PAD_L - 4}" y="{y + 4:.1f}" '
                     f'text-anchor="end" font-size="10" fill="#667085">{escape(label)}</text>')
    if points:
        step = plot_w / len(points)
        gaps = [i for i, (_at, value) in enumerate(points) if value is None]
        for first, last in _runs(gaps):  # no data: shaded, so a gap is not read as 0
            parts.append(
                f'<rect class="nodata" x="{PAD_L + first * step:.1f}" y="{PAD_T}" '
                f'width="{(last - first + 1) * step:.1f}" height="{plot_h:.1f}" '
                f'fill="#eef0f4"><title>no data from {instant_text(points[first][0])}'
                f'</title></rect>')
        if gaps:
            parts.append(f'<text x="{WIDTH / 2}" y="{HEIGHT - 6}" font-size="10" fill="#667085" '
                         f'text-anchor="middle">shaded: no data</text>')
        for i, (at, value) in enumerate(points):
            x = PAD_L + i * step
            if value is None:
                continue
            height = plot_h * min(1.0, float(value) / max_value) if max_value else 0
            parts.append(
                f'<rect x="{x + step * 0.1:.1f}" y="{PAD_T + plot_h - height:.1f}" '
                f'width="{max(step * 0.8, 0.5):.1f}" height="{height:.1f}" fill="{color}">'
                f'<title>{instant_text(at)}: {float(value):.1f}{escape(unit)}</title></rect>'
            )
        for i in (0, len(points) - 1):
            at = points[i][0]
            anchor = "start" if i == 0 else "end"
            x = PAD_L if i == 0 else WIDTH - 8
            parts.append(f'<text x="{x}" y="{HEIGHT - 6}" font-size="10" fill="#667085" '
                         f'text-anchor="{anchor}">{instant_text(at)}</text>')
    else:
        parts.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" '
                     f'fill="#667085">No data</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))


def _runs(indexes: list[int]) -> list[tuple[int, int]]:
    """Consecutive runs of sorted indexes as (first, last) pairs."""
    runs: list[tuple[int, int]] = []
    for i in indexes:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


RESERVED_COLOR, BUSY_COLOR = "#c7d4f5", "#2f5bd3"
# A chart's text is drawn at 10 units of its viewBox: a chart shown about `width` px wide
# wants a viewBox about that wide, or its labels shrink with it (a small multiple drawn
# at 720 units in a 340 px card had 4 px labels).
COMPACT = (360, 150)


def svg_reserved_busy_chart(*, days: Sequence, title: str,
                            size: tuple[int, int] = (WIDTH, HEIGHT)) -> SafeString:
    """Reserved (pale) and busy-inside-reserved (dark, drawn over it) GPU-hours per UTC
    day, from `usage.daily.DayUsage` rows; the y axis is rounded up to a readable step.
    `size`: the viewBox, about the size in px the chart is shown at (`COMPACT` for the
    small multiples)."""
    width, height = size
    plot_w, plot_h = width - PAD_L - 8, height - PAD_B - PAD_T
    peak = max([float(d.reserved_s) / 3600 for d in days] + [float(d.busy_s) / 3600
                                                              for d in days] + [0])
    top = _nice_ceiling(peak)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'class="chart reserved-busy" role="img" aria-label="{escape(title)}">'
        f'<title>{escape(title)}</title>',
    ]
    for fraction in (0, 0.5, 1):
        y = PAD_T + plot_h * (1 - fraction)
        parts.append(f'<line x1="{PAD_L}" x2="{width - 8}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#e3e7ee"/><text x="{PAD_L - 4}" y="{y + 4:.1f}" '
                     f'text-anchor="end" font-size="10" fill="#667085">'
                     f'{top * fraction:g} h</text>')
    if not days or peak == 0:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" '
                     f'fill="#667085">Nothing reserved in this period</text>')
    step = plot_w / max(len(days), 1)
    for i, d in enumerate(days):
        x = PAD_L + i * step
        label = (f"{d.day:%a %Y-%m-%d}: reserved {d.reserved_hours} GPU-h, busy "
                 f"{d.busy_hours} GPU-h")
        for value, color, cls in ((d.reserved_s, RESERVED_COLOR, "reserved"),
                                  (d.busy_s, BUSY_COLOR, "busy")):
            bar_h = plot_h * float(value) / 3600 / top if top else 0
            parts.append(
                f'<rect class="{cls}" data-day="{d.day:%Y-%m-%d}" x="{x + step * 0.12:.1f}" '
                f'y="{PAD_T + plot_h - bar_h:.1f}" width="{max(step * 0.76, 0.5):.1f}" '
                f'height="{bar_h:.1f}" fill="{color}"><title>{escape(label)}</title></rect>')
    for i in sorted({0, len(days) - 1} if days else set()):
        anchor, x = ("start", PAD_L) if i == 0 else ("end", width - 8)
        parts.append(f'<text x="{x}" y="{height - 6}" font-size="10" fill="#667085" '
                     f'text-anchor="{anchor}">{days[i].day:%d %b}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^n at or above `value` (1 for nothing)."""
    if value <= 0:
        return 1
    magnitude = 10 ** (len(str(int(value))) - 1) if value >= 1 else 0.1
    for factor in (1, 2, 2.5, 5, 10):
        if factor * magnitude >= value:
            return factor * magnitude
    return 10 * magnitude
