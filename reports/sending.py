"""Sending an approved statement to its team's leads (accounting.md, Closing a period):
one message per lead, summary in the body, CSV and PDF attached, through the one mail
module under the key `statement:<id>`. Delivery is recorded per recipient there, so a
retry after an SMTP outage or a killed worker mails only the leads not yet served. The
statement becomes `sent` only once every lead is served, and then the team's channels
are told (once: the notification outbox's key is the mail's). Retries are scheduled on those
records, not in the broker: the `reports.statements_send_pending` sweep (every minute)
starts again every sending that failed, was interrupted, or never began."""

from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from accounts.selectors import team_leads
from gpuquota.core.errors import Conflict
from gpuquota.core.timeutil import Period
from gpuquota.mail.conf import base_url, mail_enabled
from gpuquota.mail.selectors import mail_keys_waiting
from gpuquota.mail.services import Attachment, MailOutcome, mail_send
from gpuquota.outbox.render import Message
from reports.channels import channels_notify
from reports.conf import (
    finance_mailbox,
    organisation_name,
    statement_send_stale_s,
    statement_send_sweep_s,
)
from reports.documents import (
    statement_csv_bytes,
    statement_filename,
    statement_pdf_bytes,
)
from reports.energy import statement_energy
from reports.export import statement_export, statement_lines
from reports.models import Statement, StatementLine
from reports.services_statements import statement_mark_sent

KIND_LABELS = dict(StatementLine.Kind.choices)


def statement_mail_key(statement: Statement) -> str:
    return f"statement:{statement.pk}"


def _percent(ratio: str) -> str:
    return f"{(Decimal(ratio) * 100).quantize(Decimal('0.1'), rounding=ROUND_HALF_UP)}%"


def _mail_context(statement: Statement, export: dict) -> dict:
    lines = [
        line | {"label": KIND_LABELS.get(line["kind"], line["kind"])} for line in export["lines"]
    ]
    return {
        "export": export | {"lines": lines},
        "organisation": organisation_name(),
        "team_name": statement.team_name,
        "cost_center": statement.cost_center,
        "period_name": f"{Period.parse_month(statement.period_label).start:%B %Y}",
        "energy": statement_energy(statement, statement_lines(statement)),
        "utilization_pct": _percent(export["utilization"]["utilization"]),
        "coverage_pct": _percent(export["utilization"]["coverage"]),
        "pdf_name": statement_filename(statement, "pdf"),
        "csv_name": statement_filename(statement, "csv"),
        "statement_path": reverse(
            "statement_detail", args=[statement.team.slug, statement.period_label]
        ),
    }


def statement_attachments(*, statement: Statement, now: datetime | None = None) -> list[Attachment]:
    """The statement's CSV and PDF, as mail attachments."""
    return [
        Attachment(
            statement_filename(statement, "pdf"),
            statement_pdf_bytes(statement=statement, now=now),
            "application/pdf",
        ),
        Attachment(
            statement_filename(statement, "csv"),
            statement_csv_bytes(statement=statement),
            "text/csv",
        ),
    ]


def statement_copies(statement: Statement) -> list[str]:
    """Who gets a copy of the statement mail: the organisation's finance mailbox and the
    team's cost-center owner (either may be unset)."""
    return [address for address in (finance_mailbox(), statement.team.cost_center_owner_email)
            if address]


def statement_send(*, statement: Statement, now: datetime | None = None) -> MailOutcome:
    """Mail an approved statement to each current lead of its team, once per lead, and
    mark it `sent` when every lead is served (sent now, earlier, or opted out). Refused
    for a draft and for a team without leads; safe to call again after a partial send."""
    statement = Statement.objects.select_related("team", "approved_by").get(pk=statement.pk)
    if statement.status == Statement.Status.DRAFT:
        raise Conflict("A draft cannot be sent: approve it first.", field="status")
    leads = team_leads(team=statement.team)
    if not leads:
        raise Conflict(f"{statement.team.name} has no lead to send the statement to.", field="team")
    export = statement_export(statement)
    outcome = mail_send(
        template="statement",
        recipients=leads,
        context=_mail_context(statement, export),
        key=statement_mail_key(statement),
        attachments=statement_attachments(statement=statement, now=now),
        cc=statement_copies(statement),
    )
    if outcome.complete and statement.status == Statement.Status.APPROVED:
        with transaction.atomic():  # marked sent and told, or neither
            statement_mark_sent(statement=statement, at=now or timezone.now())
            channels_notify(team=statement.team, key=statement_mail_key(statement),
                            message=statement_message(statement, export), now=now)
    return outcome


def statement_message(statement: Statement, export: dict) -> Message:
    """What the team's channels are told once its statement has reached every lead."""
    number = f" {statement.number}" if statement.number else ""
    total = f"{export['total']} {export['currency']}"
    return Message(
        event="statement.sent",
        title=f"{statement.team_name}: statement{number} for {statement.period_label} sent",
        text=(f"The {statement.period_label} statement of {statement.team_name} ({total}) "
              "was mailed to the team's leads, with its CSV and PDF."),
        facts=[("Total", total), ("Utilization", _percent(export["utilization"]["utilization"])),
               ("Cost center", statement.cost_center or "none")],
        link=base_url() + reverse("statement_detail",
                                  args=[statement.team.slug, statement.period_label]),
        data={"team": statement.team_slug, "period": statement.period_label,
              "number": statement.number, "total": export["total"],
              "currency": export["currency"]})


def statements_send_due_ids(*, now: datetime) -> list[int]:
    """Approved statements, oldest first, whose sending should start (again) at `now`: the
    approval's own send had `statement_send_stale_s()` to begin, and no lead is being
    served right now or waiting for a retry after a failure (`mail_keys_waiting`). So a
    send interrupted by a killed worker or a lost task starts again within minutes, and a
    failing one is retried with backoff. A team without a lead is tried in the first sweep
    of each hour after approval (its refusal logged), and at once when it has a lead again.
    Nothing while mail is switched off."""
    if not mail_enabled():
        return []
    stale_s = statement_send_stale_s()
    approved = (Statement.objects.filter(status=Statement.Status.APPROVED,
                                         approved_at__lte=now - timedelta(seconds=stale_s))
                .select_related("team").order_by("approved_at", "pk"))
    waiting = mail_keys_waiting(keys=[statement_mail_key(s) for s in approved], now=now,
                                stale_s=stale_s)
    return [s.pk for s in approved if statement_mail_key(s) not in waiting
            and (team_leads(team=s.team) or _first_sweep_of_the_hour(s.approved_at, now))]


def _first_sweep_of_the_hour(approved_at: datetime, now: datetime) -> bool:
    return (now - approved_at).total_seconds() % 3600 < statement_send_sweep_s()

