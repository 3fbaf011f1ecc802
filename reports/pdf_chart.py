"""The statement PDF's chart: reserved versus busy GPU-hours per UTC day."""

import math
from collections.abc import Sequence
from datetime import date
from fractions import Fraction
from typing import Protocol

from reportlab.graphics.charts.barcharts import VerticalBarChart
from reportlab.graphics.charts.legends import Legend
from reportlab.graphics.shapes import Drawing, String
from reportlab.lib import colors
from reportlab.lib.units import mm

MUTED = colors.HexColor("#616e7c")
RULE = colors.HexColor("#cbd2d9")
RESERVED_FILL = colors.HexColor("#93c5fd")
BUSY_FILL = colors.HexColor("#1d4ed8")


class DailyUsage(Protocol):
    """One UTC day of a team's reserved and busy GPU-seconds (gpuquota.usage.daily.DayUsage)."""

    day: date
    reserved_s: int
    busy_s: Fraction


def _axis_scale(peak: float) -> tuple[float, float]:
    """A round axis maximum above `peak` and its step (1, 2 or 5 × 10^n, four to eight steps)."""
    if peak <= 0:
        return 1.0, 0.25
    step = 10 ** math.floor(math.log10(peak / 4))
    for factor in (1, 2, 5, 10):
        if peak / (step * factor) <= 8:
            step *= factor
            break
    return step * math.ceil(peak * 1.05 / step), step


def daily_chart(daily: Sequence[DailyUsage], width: float) -> Drawing:
    """A bar chart, two bars a day; hours as floats, for drawing only."""
    height = 62 * mm
    drawing = Drawing(width, height)
    chart = VerticalBarChart()
    chart.x, chart.y = 12 * mm, 12 * mm
    chart.width, chart.height = width - 16 * mm, height - 24 * mm
    reserved = [float(day.reserved_s) / 3600 for day in daily]
    busy = [float(Fraction(day.busy_s)) / 3600 for day in daily]
    chart.data = [reserved, busy]
    chart.categoryAxis.categoryNames = [
        f"{day.day.day}" if day.day.day % 2 or len(daily) <= 16 else "" for day in daily
    ]
    chart.categoryAxis.labels.fontSize = 6.5
    chart.categoryAxis.labels.fillColor = MUTED
    chart.categoryAxis.strokeColor = RULE
    chart.valueAxis.valueMin = 0
    chart.valueAxis.labels.fontSize = 6.5
    chart.valueAxis.labels.fillColor = MUTED
    chart.valueAxis.strokeColor = RULE
    chart.valueAxis.visibleGrid = True
    chart.valueAxis.gridStrokeColor = colors.HexColor("#e4e7eb")
    chart.valueAxis.gridStrokeWidth = 0.3
    chart.valueAxis.valueMax, chart.valueAxis.valueStep = _axis_scale(
        max(reserved + busy, default=0)
    )
    chart.barSpacing = 0.5
    chart.groupSpacing = 2.5
    chart.bars[0].fillColor = RESERVED_FILL
    chart.bars[1].fillColor = BUSY_FILL
    chart.bars.strokeColor = None
    drawing.add(chart)
    legend = Legend()
    legend.x, legend.y = width - 58 * mm, height - 1 * mm
    legend.alignment = "right"
    legend.columnMaximum = 1
    legend.fontSize = 7
    legend.boxAnchor = "nw"
    legend.deltax = 26 * mm
    legend.colorNamePairs = [(RESERVED_FILL, "Reserved"), (BUSY_FILL, "Busy")]
    drawing.add(legend)
    drawing.add(String(0, height - 4 * mm, "GPU-hours", fontSize=7, fillColor=MUTED))
    drawing.add(
        String(
            chart.x + chart.width / 2,
            2 * mm,
            "Day of month (UTC)",
            fontSize=7,
            fillColor=MUTED,
            textAnchor="middle",
        )
    )
    return drawing
