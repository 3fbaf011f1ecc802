"""The statement PDF: it opens, carries the export's figures and says DRAFT when it is one."""

import io
from dataclasses import dataclass
from datetime import UTC, date, datetime
from fractions import Fraction

import pypdf

from reports.pdf import StatementHeader, statement_pdf

EXPORT = {
    "team": "vision",
    "period": "2026-10",
    "currency": "USD",
    "status": "approved",
    "lines": [
        {"kind": "reserved", "gpu_class": "H100-80GB", "seconds": 5356800, "hours": "1488.00",
         "rate": "2.50", "amount": "3720.00"},
        {"kind": "failure_credit", "gpu_class": "H100-80GB", "seconds": 45000, "hours": "12.50",
         "rate": "2.50", "amount": "-31.25"},
        {"kind": "on_demand", "gpu_class": "L4", "seconds": 144900, "hours": "40.25",
         "rate": "0.80", "amount": "32.20"},
        {"kind": "adjustment", "gpu_class": None, "seconds": None, "hours": None, "rate": None,
         "amount": "-100.00", "reason": "Scheduler outage credit"},
    ],
    "total": "3620.95",
    "utilization": {"reserved_hours": "1488.00", "busy_hours": "702.31",
                    "utilization": "0.4720", "coverage": "0.9810", "lent_hours": "36.50",
                    "lent_busy_hours": "12.25"},
    "cost_center": "CC-4410", "approved_at": "2026-11-04T09:00:00Z",
}  # fmt: skip


@dataclass
class Day:
    day: date
    reserved_s: int
    busy_s: Fraction


def _header(**overrides) -> StatementHeader:
    values = {
        "organisation": "Example Research Institute",
        "team_name": "Computer Vision",
        "cost_center": "CC-4410",
        "generated_at": datetime(2026, 11, 4, 9, 30, tzinfo=UTC),
        "approved_by": "admin",
        "approved_at": datetime(2026, 11, 4, 9, 0, tzinfo=UTC),
    }
    return StatementHeader(**(values | overrides))


def _text(pdf: bytes) -> str:
    reader = pypdf.PdfReader(io.BytesIO(pdf))
    return "\n".join(page.extract_text() for page in reader.pages)


def _days(n: int) -> list[Day]:
    return [Day(date(2026, 10, d), 86400, Fraction(86400 * d, 31)) for d in range(1, n + 1)]


def test_pdf_carries_organisation_team_period_lines_total_and_utilization():
    pdf = statement_pdf(export=EXPORT, header=_header(), daily=_days(31))
    text = _text(pdf)
    for expected in [
        "Example Research Institute",
        "Computer Vision (vision)",
        "CC-4410",
        "October 2026",
        "APPROVED",
        "3,720.00",
        "-31.25",
        "32.20",
        "-100.00",
        "Scheduler outage credit",
        "3,620.95 USD",
        "1,488.00",
        "702.31",
        "47.2 %",
        "98.1 %",
        "Lent GPU-hours",
        "36.50",
        "12.25",
        "Reserved versus busy GPU-hours per day",
        "Page 1 of 1",
        "generated 2026-11-04 09:30 UTC",
    ]:
        assert expected in text, expected
    assert "DRAFT" not in text
    assert pypdf.PdfReader(io.BytesIO(pdf)).metadata.title == "Statement vision 2026-10"


def test_a_draft_says_so_on_every_page_and_a_month_in_progress_is_to_date():
    many_lines = [dict(EXPORT["lines"][0], rate=f"{n}.00") for n in range(1, 90)]
    export = EXPORT | {"status": "draft", "lines": many_lines}
    pdf = statement_pdf(
        export=export,
        header=_header(approved_at=None, generated_at=datetime(2026, 10, 20, 8, tzinfo=UTC)),
        daily=_days(20),
    )
    reader = pypdf.PdfReader(io.BytesIO(pdf))
    assert len(reader.pages) >= 2
    for number, page in enumerate(reader.pages, start=1):
        text = page.extract_text()
        assert "DRAFT" in text
        assert f"Page {number} of {len(reader.pages)}" in text
    assert "to date (2026-10-20 08:00 UTC)" in _text(pdf)
    assert "Approved" not in _text(pdf)


def test_an_empty_statement_renders():
    export = EXPORT | {
        "lines": [],
        "total": "0.00",
        "utilization": {"reserved_hours": "0.00", "busy_hours": "0.00", "utilization": "0.0000",
                        "coverage": "0.0000", "lent_hours": "0.00", "lent_busy_hours": "0.00"},
    }  # fmt: skip
    text = _text(statement_pdf(export=export, header=_header(cost_center=""), daily=[]))
    assert "No charges in this period." in text
    assert "0.00 USD" in text
