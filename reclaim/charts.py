"""The review page's small chart: one row per GPU, one cell per hour of the look-back
window, shaded by mean utilization (server-rendered SVG, no JavaScript, no CDN)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from html import escape

from django.utils.safestring import SafeString, mark_safe

LABEL_W, CELL_H, GAP, AXIS_H, WIDTH = 104, 14, 2, 14, 620


@dataclass
class GpuRow:
    """A GPU's label and its mean utilization (0..100, None: no report) per hour."""

    label: str
    values: Sequence[Decimal | float | None]


def _fill(value) -> str:
    """Light grey for 0 %, the brand blue at 100 %; no data is left blank (dashed)."""
    share = max(0.0, min(1.0, float(value) / 100))
    # from #d9dee7 (idle) to #2f5bd3 (busy)
    r, g, b = (round(a + (z - a) * share) for a, z in ((0xd9, 0x2f), (0xde, 0x5b), (0xe7, 0xd3)))
    return f"#{r:02x}{g:02x}{b:02x}"


def svg_utilization_strips(*, hours: Sequence[datetime], rows: Sequence[GpuRow],
                           title: str) -> SafeString:
    """One strip per GPU over `hours` (UTC hour starts); each cell's tooltip gives the
    hour and the value."""
    plot_w = WIDTH - LABEL_W
    step = plot_w / max(1, len(hours))
    height = len(rows) * (CELL_H + GAP) + AXIS_H
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'class="chart strips" role="img" aria-label="{escape(title)}" '
        f'width="{WIDTH}" height="{height}"><title>{escape(title)}</title>'
    ]
    for i, row in enumerate(rows):
        y = i * (CELL_H + GAP)
        parts.append(f'<text x="{LABEL_W - 6}" y="{y + CELL_H - 3}" text-anchor="end" '
                     f'font-size="10" fill="#344054">{escape(row.label)}</text>')
        for j, (hour, value) in enumerate(zip(hours, row.values, strict=True)):
            x = LABEL_W + j * step
            tip = (f"{row.label} {hour:%Y-%m-%d %H}:00 UTC: "
                   + ("no report" if value is None else f"{float(value):.1f}% mean utilization"))
            style = ('fill="#fff" stroke="#cfd4dc" stroke-dasharray="2 2"' if value is None
                     else f'fill="{_fill(value)}"')
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{max(step - 1, 0.5):.1f}" '
                         f'height="{CELL_H}" {style}><title>{escape(tip)}</title></rect>')
    if hours:
        axis_y = height - 3
        parts.append(f'<text x="{LABEL_W}" y="{axis_y}" font-size="10" fill="#667085">'
                     f'{hours[0]:%m-%d %H}:00</text>')
        parts.append(f'<text x="{WIDTH}" y="{axis_y}" font-size="10" fill="#667085" '
                     f'text-anchor="end">{hours[-1]:%m-%d %H}:00 UTC</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))
