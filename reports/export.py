"""The statement export finance integrates with (accounting.md, Statement export):
decimal strings for amounts, rates and hours, integer seconds, one CSV row per line.
Rendered from the stored statement only, so the JSON, the CSV and the PDF agree (team,
cost center and status as the statement keeps them). The CSV
goes through `gpuquota.core.csvsafe` (formula injection neutralised, every cell quoted)."""

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

from gpuquota.core.csvsafe import csv_document
from gpuquota.usage.figures import display_decimal
from reports.energy import basis_texts
from reports.models import Statement, StatementLine

# The specification's columns, in its order; the last three repeat the statement's values on
# every row: each row can be booked alone.
SPEC_COLUMNS = ["team", "period", "currency", "kind", "gpu_class", "seconds", "hours", "rate",
                "amount", "reason", "cost_center", "status", "approved_at"]
# Added after them (docs/accounting.md, Statement export): the line's energy and CO2e as
# kept when drafted (3 places; empty where unknown), and the statement's PUE and intensity
# basis repeated on every row.
ENERGY_COLUMNS = ["energy_kwh", "facility_energy_kwh", "co2e_kg", "idle_energy_kwh",
                  "idle_co2e_kg", "energy_basis"]
CSV_COLUMNS = SPEC_COLUMNS + ENERGY_COLUMNS


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


def instant_text(instant: datetime | None) -> str | None:
    """An instant as the export writes it: UTC, whole seconds, `Z`."""
    return None if instant is None else instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utilization_export(statement: Statement) -> dict:
    reserved = statement.reserved_s

    def ratio(seconds: int) -> str:
        return str(display_decimal(Fraction(seconds, reserved) if reserved else 0, "0.0001"))

    return {"reserved_hours": hours_text(reserved), "busy_hours": hours_text(statement.busy_s),
            "utilization": ratio(statement.busy_s), "coverage": ratio(statement.covered_s),
            "lent_hours": hours_text(statement.lent_s),
            "lent_busy_hours": hours_text(statement.lent_busy_s)}


def statement_lines(statement: Statement) -> list[StatementLine]:
    return sorted(statement.lines.all(), key=lambda line: line.position)


def statement_export(statement: Statement) -> dict:
    """The spec's JSON for one statement; a failed draft adds `error` (why it cannot be
    approved) and has no currency."""
    body = {"team": statement.team_slug, "period": statement.period_label,
            "currency": statement.currency or None, "status": statement.status,
            "lines": [line_export(line) for line in statement_lines(statement)],
            "total": str(statement.total), "utilization": utilization_export(statement),
            "cost_center": statement.cost_center,
            "approved_at": instant_text(statement.approved_at), "number": statement.number}
    if statement.error:
        body["error"] = statement.error
    return body


def _figure(value: Decimal | None) -> str:
    return "" if value is None else f"{value:.3f}"


def statement_csv_rows(statement: Statement) -> list[list]:
    """One row per line in CSV_COLUMNS order."""
    rows = []
    basis = " | ".join(basis_texts(statement.energy_basis or []))
    for line in statement_lines(statement):
        data = line_export(line)
        rows.append([statement.team_slug, statement.period_label, statement.currency, line.kind,
                     data["gpu_class"] or "", "" if data["seconds"] is None else data["seconds"],
                     data["hours"] or "", data["rate"] or "", data["amount"], line.reason,
                     statement.cost_center, statement.status,
                     instant_text(statement.approved_at) or "",
                     _figure(line.energy_kwh), _figure(line.facility_energy_kwh),
                     _figure(line.co2e_kg), _figure(line.idle_energy_kwh),
                     _figure(line.idle_co2e_kg), basis])
    return rows


def statement_csv(statement: Statement) -> str:
    """The CSV file of one statement (header and one row per line)."""
    return csv_document(CSV_COLUMNS, statement_csv_rows(statement))


def statement_csv_filename(statement: Statement) -> str:
    return f"statement-{statement.team_slug}-{statement.period_label}.csv"


def organisation_export(*, period_label: str, statements: list[Statement]) -> dict:
    """Every visible team's statement of the month."""
    return {"period": period_label, "statements": [statement_export(s) for s in statements]}


def organisation_csv(statements: list[Statement]) -> str:
    """One file per month for finance: every line of every statement, in the team CSV's
    columns."""
    rows = [row for s in statements for row in statement_csv_rows(s)]
    return csv_document(CSV_COLUMNS, rows)
