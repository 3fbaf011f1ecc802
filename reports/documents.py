"""A statement's files, from the same data as the export API: the CSV and the PDF."""

from datetime import datetime

from django.utils import timezone

from reports.conf import organisation_name
from reports.daily import statement_daily_usage
from reports.energy import statement_energy
from reports.export import statement_csv, statement_export
from reports.models import Statement
from reports.pdf import StatementHeader, statement_pdf


def statement_filename(statement: Statement, extension: str) -> str:
    return f"statement-{statement.team_slug}-{statement.period_label}.{extension}"


def statement_csv_bytes(*, statement: Statement) -> bytes:
    """The statement's CSV exactly as `GET /api/v1/statements/<team>/<YYYY-MM>.csv`."""
    return statement_csv(statement).encode()


def statement_pdf_bytes(*, statement: Statement, now: datetime | None = None) -> bytes:
    """The statement's PDF: the export's figures, the team's snapshot, and reserved versus
    busy GPU-seconds per day over the period the figures cover (frozen with an approved
    statement, so a later change of usage never alters its PDF)."""
    header = StatementHeader(
        organisation=organisation_name(),
        team_name=statement.team_name,
        cost_center=statement.cost_center,
        generated_at=now or timezone.now(),
        approved_by=statement.approved_by.username if statement.approved_by else "",
        approved_at=statement.approved_at,
        sent_at=statement.sent_at,
        figures_until=statement.computed_until,
    )
    return statement_pdf(
        export=statement_export(statement),
        header=header,
        daily=statement_daily_usage(statement),
        energy=statement_energy(statement, list(statement.lines.order_by("position"))),
    )
