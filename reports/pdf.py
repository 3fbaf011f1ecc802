"""The statement as a PDF a finance team can file.

Rendered from the statement's export dict (accounting.md "Statement export": the same
data as the JSON and CSV, so the three never disagree) plus what the export does not
carry: the organisation, the team's name and cost center, and the daily reserved versus
busy GPU-seconds for the chart. Hours and percentages are rounded at display only.
Text from users and admins (organisation, team name, cost center, reasons) goes through
`_plain`: reportlab's Paragraph reads its text as markup, so unescaped it would turn a
reason into a tag, a link or a failed build.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal
from io import BytesIO
from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.enums import TA_RIGHT
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import mm
from reportlab.pdfgen import canvas as pdfcanvas
from reportlab.platypus import (
    KeepTogether,
    Paragraph,
    SimpleDocTemplate,
    Spacer,
    Table,
    TableStyle,
)

from gpuquota.core.timeutil import Period
from reports.lines_shown import (
    UNDER_A_HUNDREDTH,
    UNDER_HALF_A_CENT,
    amount_under_half_a_cent,
    hours_under_a_hundredth,
)
from reports.pdf_chart import DailyUsage, daily_chart
from reports.pdf_energy import energy_flowables

INK = colors.HexColor("#1f2933")
MUTED = colors.HexColor("#616e7c")
RULE = colors.HexColor("#cbd2d9")
BAND = colors.HexColor("#f0f4f8")
ACCENT = colors.HexColor("#1d4ed8")
DRAFT_RED = colors.HexColor("#b91c1c")

#: Width of the text frame: the page less 20 mm margins and the frame's 6 pt paddings.
WIDTH = A4[0] - 40 * mm - 12

UTILIZATION_NOTE = (
    "Utilization is busy over reserved GPU-seconds; coverage is the share of reserved time the "
    "node agents reported. Hours are rounded for display; amounts are computed from exact seconds."
)

KIND_LABELS = {
    "reserved": "Reserved GPU time",
    "failure_credit": "Failure credit (failed GPU)",
    "on_demand": "On-demand (busy, unreserved)",
    "borrowed": "Borrowed (busy on other teams' lent GPUs)",
    "lending_credit": "Lending credit (own GPUs lent while idle)",
    "adjustment": "Adjustment",
}


@dataclass(frozen=True)
class StatementHeader:
    """What the PDF shows beyond the export dict."""

    organisation: str
    team_name: str
    cost_center: str
    generated_at: datetime
    approved_by: str = ""
    approved_at: datetime | None = None
    sent_at: datetime | None = None
    figures_until: datetime | None = None  # the figures cover the month up to here


def _money(text: str | None) -> str:
    """'-1234.5' → '-1,234.50' (the export's decimal string, grouped for reading)."""
    if text is None:
        return ""
    value = Decimal(text)
    formatted = f"{abs(value):,.2f}"
    return f"-{formatted}" if value < 0 else formatted


def _percent(ratio: str) -> str:
    return f"{(Decimal(ratio) * 100).quantize(Decimal('0.1'), rounding=ROUND_HALF_UP)} %"


def _utc(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else ""


class _Styles:
    def __init__(self):
        base = getSampleStyleSheet()
        self.body = ParagraphStyle("body", parent=base["BodyText"], fontSize=9, leading=12)
        self.small = ParagraphStyle("small", parent=self.body, fontSize=8, textColor=MUTED)
        self.cell = ParagraphStyle("cell", parent=self.body, fontSize=8.5, leading=11)
        self.reason = ParagraphStyle("reason", parent=self.cell, textColor=MUTED, fontSize=8)
        self.h1 = ParagraphStyle(
            "h1", parent=base["Heading1"], fontSize=17, leading=21, textColor=INK, spaceAfter=0
        )
        self.h2 = ParagraphStyle(
            "h2",
            parent=base["Heading2"],
            fontSize=11,
            leading=14,
            textColor=INK,
            spaceBefore=10,
            spaceAfter=5,
        )
        self.org = ParagraphStyle(
            "org", parent=self.body, fontName="Helvetica-Bold", fontSize=10, textColor=ACCENT
        )
        self.right = ParagraphStyle("right", parent=self.body, alignment=TA_RIGHT)
        self.banner = ParagraphStyle(
            "banner", parent=self.body, textColor=DRAFT_RED, fontName="Helvetica-Bold"
        )


def _plain(text: str, style: ParagraphStyle) -> Paragraph:
    """A paragraph showing `text` literally: its markup characters are escaped, so no tag,
    font change or link can come from it."""
    return Paragraph(escape(text), style)


def _period_label(export: dict, until: datetime) -> str:
    period = Period.parse_month(export["period"])
    last_day = period.end.date().toordinal() - 1
    label = (
        f"{period.start:%B %Y} ({period.start:%d %b} \u2013 "
        f"{date.fromordinal(last_day):%d %b %Y}, UTC)"
    )
    if until < period.end:
        label += f", to date ({_utc(until)})"
    return label


def _header(export: dict, header: StatementHeader, st: _Styles) -> list:
    status = export["status"]
    title = Table(
        [
            [
                [
                    _plain(header.organisation, st.org),
                    Paragraph("GPU chargeback statement", st.h1),
                ],
                Paragraph(
                    f"<font size=8 color='#616e7c'>STATUS</font><br/>"
                    f"<font size=13><b>{status.upper()}</b></font>",
                    st.right,
                ),
            ]
        ],
        colWidths=[WIDTH - 45 * mm, 45 * mm],
    )
    title.setStyle(
        TableStyle(
            [
                ("VALIGN", (0, 0), (-1, -1), "BOTTOM"),
                ("LINEBELOW", (0, 0), (-1, 0), 1.2, ACCENT),
                ("BOTTOMPADDING", (0, 0), (-1, -1), 6),
                ("LEFTPADDING", (0, 0), (-1, -1), 0),
                ("RIGHTPADDING", (0, 0), (-1, -1), 0),
            ]
        )
    )
    facts = [
        ("Statement number", export.get("number") or "given at approval"),
        ("Team", f"{header.team_name} ({export['team']})"),
        ("Cost center", header.cost_center or "\u2014"),
        ("Period", _period_label(export, header.figures_until or header.generated_at)),
        ("Currency", export["currency"] or "\u2014"),
    ]
    if header.approved_at:
        who = f" by {header.approved_by}" if header.approved_by else " by the system"
        facts.append(("Approved", f"{_utc(header.approved_at)}{who}"))
    if header.sent_at:
        facts.append(("Sent", _utc(header.sent_at)))
    table = Table(
        [[Paragraph(k, st.small), _plain(v, st.body)] for k, v in facts],
        colWidths=[30 * mm, WIDTH - 30 * mm],
    )
    table.setStyle(
        TableStyle(
            [
                ("LEFTPADDING", (0, 0), (-1, -1), 0),
                ("TOPPADDING", (0, 0), (-1, -1), 1),
                ("BOTTOMPADDING", (0, 0), (-1, -1), 1),
                ("VALIGN", (0, 0), (-1, -1), "MIDDLE"),
            ]
        )
    )
    flow = [title, Spacer(1, 6), table]
    if status == "draft":
        flow += [
            Spacer(1, 6),
            Paragraph(
                "DRAFT \u2014 not approved. These figures are recomputed until an administrator "
                "approves the period; do not book them.",
                st.banner,
            ),
        ]
    return flow


def _hours_cell(line: dict) -> str:
    if line["hours"] is None:
        return ""
    if hours_under_a_hundredth(line["seconds"]):
        return UNDER_A_HUNDREDTH
    return f"{Decimal(line['hours']):,.2f}"


def _lines_table(export: dict, st: _Styles) -> Table:
    currency = export["currency"]
    rows = [["Description", "GPU class", "Seconds", "Hours", "Rate", f"Amount ({currency})"]]
    for line in export["lines"]:
        description = [_plain(KIND_LABELS.get(line["kind"], line["kind"]), st.cell)]
        if line.get("reason"):
            description.append(_plain(line["reason"], st.reason))
        if amount_under_half_a_cent(line["seconds"], line["amount"]):
            description.append(_plain(UNDER_HALF_A_CENT.capitalize(), st.reason))
        rows.append(
            [
                description,
                line["gpu_class"] or "",
                "" if line["seconds"] is None else f"{line['seconds']:,}",
                _hours_cell(line),
                line["rate"] or "",
                _money(line["amount"]),
            ]
        )
    if len(rows) == 1:
        rows.append([Paragraph("No charges in this period.", st.reason), "", "", "", "", ""])
    rows.append(["Total", "", "", "", "", f"{_money(export['total'])} {currency}"])
    table = Table(
        rows,
        colWidths=[WIDTH - 108 * mm, 27 * mm, 22 * mm, 18 * mm, 15 * mm, 26 * mm],
        repeatRows=1,
    )
    last = len(rows) - 1
    table.setStyle(
        TableStyle(
            [
                ("FONT", (0, 0), (-1, 0), "Helvetica-Bold", 8),
                ("TEXTCOLOR", (0, 0), (-1, 0), MUTED),
                ("FONT", (0, 1), (-1, -1), "Helvetica", 8.5),
                ("ALIGN", (2, 0), (-1, -1), "RIGHT"),
                ("VALIGN", (0, 0), (-1, -1), "TOP"),
                ("LINEBELOW", (0, 0), (-1, 0), 0.8, INK),
                ("LINEBELOW", (0, 1), (-1, last - 1), 0.3, RULE),
                ("ROWBACKGROUNDS", (0, 1), (-1, last - 1), [colors.white, BAND]),
                ("LINEABOVE", (0, last), (-1, last), 1, INK),
                ("FONT", (0, last), (-1, last), "Helvetica-Bold", 10),
                ("TOPPADDING", (0, last), (-1, last), 6),
            ]
        )
    )
    return table


def _utilization_table(export: dict, st: _Styles) -> Table:
    util = export["utilization"]
    cells = [
        ("Reserved GPU-hours", f"{Decimal(util['reserved_hours']):,.2f}"),
        ("Busy GPU-hours", f"{Decimal(util['busy_hours']):,.2f}"),
        ("Utilization", _percent(util["utilization"])),
        ("Coverage", _percent(util["coverage"])),
        ("Lent GPU-hours", f"{Decimal(util['lent_hours']):,.2f}"),
        ("Lent busy GPU-hours", f"{Decimal(util['lent_busy_hours']):,.2f}"),
    ]
    table = Table(
        [
            [Paragraph(k, st.small) for k, _ in cells],
            [Paragraph(f"<font size=13><b>{v}</b></font>", st.body) for _, v in cells],
        ],
        colWidths=[WIDTH / len(cells)] * len(cells),
    )
    table.setStyle(
        TableStyle(
            [
                ("BACKGROUND", (0, 0), (-1, -1), BAND),
                ("LINEAFTER", (0, 0), (-2, -1), 0.5, colors.white),
                ("TOPPADDING", (0, 0), (-1, -1), 4),
                ("BOTTOMPADDING", (0, 1), (-1, 1), 8),
            ]
        )
    )
    return table


def _page_decorations(export: dict, header: StatementHeader):
    draft = export["status"] == "draft"
    footer = (
        f"{header.organisation} \u00b7 statement {export['team']} {export['period']} "
        f"\u00b7 generated {_utc(header.generated_at)}"
    )

    class NumberedCanvas(pdfcanvas.Canvas):
        """Draws 'Page n of N' once the number of pages is known."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._pages = []

        def showPage(self):  # noqa: N802 (reportlab's name)
            self._pages.append(dict(self.__dict__))
            self._startPage()

        def save(self):
            for state in self._pages:
                self.__dict__.update(state)
                self._decorate(len(self._pages))
                super().showPage()
            super().save()

        def _decorate(self, page_count: int):
            self.saveState()
            if draft:
                self.setFillColor(colors.Color(0.73, 0.11, 0.11, alpha=0.09))
                self.setFont("Helvetica-Bold", 120)
                self.translate(A4[0] / 2, A4[1] / 2)
                self.rotate(40)
                self.drawCentredString(0, -40, "DRAFT")
                self.rotate(-40)
                self.translate(-A4[0] / 2, -A4[1] / 2)
            self.setStrokeColor(RULE)
            self.setLineWidth(0.5)
            self.line(20 * mm, 15 * mm, A4[0] - 20 * mm, 15 * mm)
            self.setFont("Helvetica", 7.5)
            self.setFillColor(MUTED)
            self.drawString(20 * mm, 10 * mm, footer)
            self.drawRightString(
                A4[0] - 20 * mm, 10 * mm, f"Page {self._pageNumber} of {page_count}"
            )
            self.restoreState()

    return NumberedCanvas


def statement_pdf(*, export: dict, header: StatementHeader, daily: Sequence[DailyUsage],
                  energy: dict | None = None) -> bytes:
    """The statement as PDF bytes: header, lines and total exactly as in `export`, the
    utilization block, a chart of reserved versus busy GPU-hours per day, and the energy
    and carbon section (`reports.pdf_energy`)."""
    st = _Styles()
    buffer = BytesIO()
    doc = SimpleDocTemplate(
        buffer,
        pagesize=A4,
        leftMargin=20 * mm,
        rightMargin=20 * mm,
        topMargin=18 * mm,
        bottomMargin=22 * mm,
        title=f"Statement {export['team']} {export['period']}",
        author=header.organisation,
        subject="GPU chargeback statement",
    )
    story = _header(export, header, st)
    story += [Paragraph("Charges", st.h2), _lines_table(export, st)]
    story.append(
        KeepTogether(
            [
                Paragraph("Utilization of reserved GPUs", st.h2),
                _utilization_table(export, st),
                Spacer(1, 3),
                Paragraph(UTILIZATION_NOTE, st.small),
            ]
        )
    )
    if daily:
        story.append(
            KeepTogether(
                [
                    Paragraph("Reserved versus busy GPU-hours per day", st.h2),
                    daily_chart(daily, WIDTH),
                ]
            )
        )
    story += energy_flowables(energy, st, WIDTH)
    doc.build(story, canvasmaker=_page_decorations(export, header))
    return buffer.getvalue()
