"""`manage.py statements --month YYYY-MM [--approve [--as admin]] [--send]`: draft or
refresh a month's statements and print a summary; approve them; mail the approved ones."""

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from accounts.models import User
from accounts.permissions import is_admin
from gpuquota.core.errors import DomainError
from reports.api import period_parse
from reports.models import Statement
from reports.sending import statement_send
from reports.services_statements import statements_approve_month, statements_draft_month


class Command(BaseCommand):
    help = "Draft or refresh a month's statements and print a summary; --approve, --send."

    def add_arguments(self, parser):
        parser.add_argument("--month", required=True, help="YYYY-MM (UTC)")
        parser.add_argument("--approve", action="store_true",
                            help="approve every draft that can be (after the settlement delay)")
        parser.add_argument("--as", dest="actor", metavar="USERNAME",
                            help="the admin who approves (default: the system)")
        parser.add_argument("--send", action="store_true",
                            help="mail every approved statement of the month to its leads")

    def handle(self, *args, month, approve, actor, send, **options):
        try:
            period = period_parse(month, timezone.now())
        except DomainError as exc:
            raise CommandError(f"--month: {exc.message}") from exc
        by = self._actor(actor)
        try:
            if approve:
                approved, refused = statements_approve_month(period=period, by=by)
                for statement, why in refused:
                    self.stderr.write(f"not approved: {statement.team_name}: {why}")
                self.stdout.write(f"approved {len(approved)} statement(s)")
            else:
                statements_draft_month(period=period)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        if send:
            self._send(period)
        self._summary(period)

    def _actor(self, username: str | None) -> User | None:
        if username is None:
            return None
        user = User.objects.filter(username=username).first()
        if user is None or not is_admin(user):
            raise CommandError(f"--as: {username!r} is not an admin")
        return user

    def _send(self, period) -> None:
        for statement in Statement.objects.filter(month=period.start.date(),
                                                  status=Statement.Status.APPROVED):
            try:
                outcome = statement_send(statement=statement)
            except DomainError as exc:
                self.stderr.write(f"not sent: {statement.team_name}: {exc.message}")
                continue
            state = "sent" if outcome.complete else f"{len(outcome.failed)} lead(s) to retry"
            self.stdout.write(f"{statement.team_name}: {state}")

    def _summary(self, period) -> None:
        rows = [("team", "status", "currency", "total", "lines", "reserved h", "note")]
        for s in Statement.objects.filter(month=period.start.date()).order_by("team_name"):
            rows.append((s.team_name, s.status, s.currency or "-", str(s.total),
                         str(s.lines.count()), f"{s.reserved_s / 3600:.2f}",
                         s.error.splitlines()[0] if s.error else ""))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        self.stdout.write(f"Statements for {period.start:%Y-%m}:")
        for row in rows:
            self.stdout.write("  ".join(cell.ljust(width) if i in (0, 1, 2, 6)
                                        else cell.rjust(width)
                                        for i, (cell, width) in enumerate(zip(row, widths,
                                                                              strict=True))
                                        ).rstrip())
