"""The statement export finance integrates with (accounting.md, Statement export):
decimal strings for amounts, rates and hours, integer seconds, one CSV row per line.
Rendered from the stored statement only, so the JSON, the CSV and the PDF agree. The CSV
goes through `gpuquota.core.csvsafe` (formula injection neutralised, every cell quoted)."""

from decimal import Decimal
from fractions import Fraction

from gpuquota.core.csvsafe import csv_document
from gpuquota.usage.figures import display_decimal
from reports.models import Statement, StatementLine

CSV_COLUMNS = ["team", "period", "currency", "kind", "gpu_class", "seconds", "hours", "rate",
               "amount", "reason"]
ORGANISATION_CSV_COLUMNS = [*CSV_COLUMNS, "cost_center"]


def rate_text(rate: Decimal) -> str:
    """A rate as stored (up to 4 places, nothing rounded), shown with at least 2."""
    text = f"{rate.normalize():f}"
    places = len(text.partition(".")[2])
    return f"{rate:.{max(2, places)}f}"


def hours_text(seconds: int) -> str:
    return str(display_decimal(Fraction(seconds, 3600)))


def line_export(line: StatementLine) -> dict:
    if line.kind == StatementLine.Kind.ADJUSTMENT:
        return {"kind": line.kind, "gpu_class": None, "seconds": None, "hours": None,
                "rate": None, "amount": str(line.amount), "reason": line.reason}
    return {"kind": line.kind, "gpu_class": line.gpu_class_name, "seconds": line.seconds,
            "hours": hours_text(line.seconds), "rate": rate_text(line.rate),
            "amount": str(line.amount)}


def utilization_export(statement: Statement) -> dict:
    reserved = statement.reserved_s

    def ratio(seconds: int) -> str:
        return str(display_decimal(Fraction(seconds, reserved) if reserved else 0, "0.0001"))

    return {"reserved_hours": hours_text(reserved), "busy_hours": hours_text(statement.busy_s),
            "utilization": ratio(statement.busy_s), "coverage": ratio(statement.covered_s)}


def _lines(statement: Statement) -> list[StatementLine]:
    return sorted(statement.lines.all(), key=lambda line: line.position)


def statement_export(statement: Statement) -> dict:
    """The spec's JSON for one statement; a failed draft adds `error` (why it cannot be
    approved) and has no currency."""
    body = {"team": statement.team_slug, "period": statement.period_label,
            "currency": statement.currency or None, "status": statement.status,
            "lines": [line_export(line) for line in _lines(statement)],
            "total": str(statement.total), "utilization": utilization_export(statement)}
    if statement.error:
        body["error"] = statement.error
    return body


def statement_csv_rows(statement: Statement, *, cost_center: bool = False) -> list[list]:
    """One row per line in CSV_COLUMNS order (ORGANISATION_CSV_COLUMNS with `cost_center`)."""
    rows = []
    for line in _lines(statement):
        data = line_export(line)
        row = [statement.team_slug, statement.period_label, statement.currency, line.kind,
               data["gpu_class"] or "", "" if data["seconds"] is None else data["seconds"],
               data["hours"] or "", data["rate"] or "", data["amount"], line.reason]
        rows.append([*row, statement.cost_center] if cost_center else row)
    return rows


def statement_csv(statement: Statement) -> str:
    """The CSV file of one statement (header and one row per line)."""
    return csv_document(CSV_COLUMNS, statement_csv_rows(statement))


def statement_csv_filename(statement: Statement) -> str:
    return f"statement-{statement.team_slug}-{statement.period_label}.csv"


def organisation_export(*, period_label: str, statements: list[Statement]) -> dict:
    """Every visible team's statement of the month, each with its cost center."""
    return {"period": period_label,
            "statements": [{**statement_export(s), "cost_center": s.cost_center}
                           for s in statements]}


def organisation_csv(statements: list[Statement]) -> str:
    """One file per month for finance: every line of every statement, with cost_center."""
    rows = [row for s in statements for row in statement_csv_rows(s, cost_center=True)]
    return csv_document(ORGANISATION_CSV_COLUMNS, rows)
