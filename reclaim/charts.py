"""The review page's small chart: one row per GPU across the recommendation's exact
look-back window, cut at whole hours; in each piece the share the agents reported is
shaded by its mean utilization and the rest is left blank (dashed), so the reported part
of a row is the coverage the evidence table gives (server-rendered SVG, no JavaScript)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from html import escape

from django.utils.safestring import SafeString, mark_safe

from gpuquota.core.timeutil import instant_text

LABEL_W, CELL_H, GAP, AXIS_H, WIDTH = 104, 14, 2, 14, 620


@dataclass(frozen=True)
class Piece:
    """A stretch of the window (a whole hour, or the partial hour at either end) and what
    the agents reported in it: covered seconds and utilization × seconds."""

    start: datetime
    end: datetime
    covered_s: int | None  # None: unknown (its samples have expired)
    util_weighted: Decimal = Decimal(0)

    @property
    def seconds(self) -> int:
        return int((self.end - self.start).total_seconds())

    @property
    def mean_util(self) -> Decimal | None:
        return self.util_weighted / self.covered_s if self.covered_s else None


@dataclass
class GpuRow:
    """A GPU's label and its pieces, in order, covering the window."""

    label: str
    pieces: Sequence[Piece]


def _fill(value) -> str:
    """Light grey for 0 %, the brand blue at 100 %."""
    share = max(0.0, min(1.0, float(value) / 100))
    # from #d9dee7 (idle) to #2f5bd3 (busy)
    r, g, b = (round(a + (z - a) * share) for a, z in ((0xd9, 0x2f), (0xde, 0x5b), (0xe7, 0xd3)))
    return f"#{r:02x}{g:02x}{b:02x}"


def _tip(label: str, piece: Piece, text: dict[datetime, str]) -> str:
    """`text`: each instant as shown, written once per chart (a chart's rows share their
    hours: 10,000 pieces on the review page, about 25 instants per chart)."""
    for instant in (piece.start, piece.end):
        if instant not in text:
            text[instant] = instant_text(instant)
    span = f"{label} {text[piece.start]} – {text[piece.end]}"
    if piece.covered_s is None:
        return f"{span}: samples expired"
    minutes = f"{piece.covered_s / 60:.0f} of {piece.seconds / 60:.0f} min reported"
    if not piece.covered_s:
        return f"{span}: no report"
    return f"{span}: {minutes}, {float(piece.mean_util):.1f}% mean utilization"


def svg_utilization_strips(*, start: datetime, end: datetime, rows: Sequence[GpuRow],
                           title: str) -> SafeString:
    """One strip per GPU over [start, end): each piece as wide as its share of the
    window, its reported share shaded by mean utilization; tooltips give the figures."""
    plot_w = WIDTH - LABEL_W
    total_s = max(1.0, (end - start).total_seconds())
    height = len(rows) * (CELL_H + GAP) + AXIS_H
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'class="chart strips" role="img" aria-label="{escape(title)}" '
        f'width="{WIDTH}" height="{height}"><title>{escape(title)}</title>'
    ]
    text: dict[datetime, str] = {}
    for i, row in enumerate(rows):
        y = i * (CELL_H + GAP)
        parts.append(f'<g class="strip" data-label="{escape(row.label)}">'
                     f'<text x="{LABEL_W - 6}" y="{y + CELL_H - 3}" text-anchor="end" '
                     f'font-size="10" fill="#344054">{escape(row.label)}</text>')
        for piece in row.pieces:
            x = LABEL_W + (piece.start - start).total_seconds() / total_s * plot_w
            w = piece.seconds / total_s * plot_w
            reported = w * min(1.0, (piece.covered_s or 0) / max(1, piece.seconds))
            tip = f"<title>{escape(_tip(row.label, piece, text))}</title>"
            # The dotted outline is the legend's "no report": only where a part of the
            # piece was not reported, so a piece's edge is no unexplained dotted line.
            outline = ('' if reported >= w else
                       ' class="unreported" stroke="#cfd4dc" stroke-dasharray="2 2"')
            parts.append(f'<g class="piece" data-covered-s="{piece.covered_s or 0}" '
                         f'data-seconds="{piece.seconds}">{tip}'
                         f'<rect x="{x:.2f}" y="{y}" width="{max(w - 0.5, 0.2):.2f}" '
                         f'height="{CELL_H}" fill="#fff"{outline}/>')
            if reported > 0:
                parts.append(f'<rect class="reported" x="{x:.2f}" y="{y}" '
                             f'width="{reported:.2f}" height="{CELL_H}" '
                             f'fill="{_fill(piece.mean_util)}"/>')
            parts.append("</g>")
        parts.append("</g>")
    axis_y = height - 3
    parts.append(f'<text x="{LABEL_W}" y="{axis_y}" font-size="10" fill="#667085">'
                 f'{instant_text(start)}</text>')
    parts.append(f'<text x="{WIDTH}" y="{axis_y}" font-size="10" fill="#667085" '
                 f'text-anchor="end">{instant_text(end)}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))
