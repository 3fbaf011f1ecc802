"""Statement lifecycle (accounting.md, Closing a period): a draft is recomputed on
demand and by beat; an admin approves it once the settlement delay has passed (frozen
from then on, by a PostgreSQL trigger too); it becomes `sent` once mailed. Corrections
are adjustments on a month not yet approved, late usage of an approved month included."""

from datetime import date, datetime
from decimal import Decimal

from django.db import connection, transaction
from django.utils import timezone

from accounts.models import Team, User
from accounts.permissions import is_admin
from gpuquota.core.dispatch import task_enqueue_on_commit
from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.fields import whole_second
from gpuquota.core.services import audit_record
from gpuquota.core.timeutil import Period
from reports import conf
from reports.carbon import carbon_basis, carbon_by_team, lines_carbon
from reports.daily import daily_usage_snapshot
from reports.late_scan import late_usage_check_settled
from reports.models import Adjustment, Statement, StatementLine
from reports.pricing import TeamDraft, team_drafts, utc_label
from reports.selectors import month_after, month_before, statement_late_usage

S = Statement.Status
NUMBER_LOCK = 0x47510010  # pg_advisory_xact_lock's first key: statement numbers
MAX_ADJUSTMENT = Decimal("1000000000")
DRAFT_FIELDS = ["currency", "total", "error", "team_name", "team_slug", "cost_center",
                "reserved_s", "covered_s", "busy_s", "lent_s", "lent_busy_s", "computed_at",
                "computed_until", "energy_basis"]


def _rate_text(rate) -> str:
    """A line's rate as a card stores it (4 places), or every place a lending credit's
    rate has beyond them."""
    places = len(f"{rate.normalize():f}".partition(".")[2])
    return f"{rate:.{max(4, places)}f}"


def month_period(month: date) -> Period:
    """The calendar month (UTC) starting on `month`."""
    return Period.month(month.year, month.month)


def period_check(*, period: Period, now: datetime, field: str = "period") -> None:
    """A calendar month that has started (the current one is 'to date')."""
    if period != Period.month(period.start.year, period.start.month):
        raise DomainError("A statement covers one calendar month (UTC).", field=field)
    if period.start > now:
        raise DomainError(f"{period.start:%Y-%m} has not started yet.", field=field)


def approval_opens(period: Period) -> datetime:
    """When the month can be approved: its end plus the settlement delay."""
    return period.end + conf.settlement_delay()


def _require_admin(by: User | None) -> None:
    """`None` is the system (a scheduled job, the management command)."""
    if by is not None and not is_admin(by):
        raise PermissionDenied("Only admins can do this.")


def _draft_fields(draft: TeamDraft, team: Team, now: datetime, until: datetime) -> dict:
    failed = bool(draft.errors)
    fields = {
        "currency": "" if failed else draft.currency,
        "total": Decimal("0.00") if failed else draft.total,
        "error": "\n".join(draft.errors),
        "team_name": team.name, "team_slug": team.slug, "cost_center": team.cost_center,
        "reserved_s": draft.reserved_s, "covered_s": draft.covered_s, "busy_s": draft.busy_s,
        "lent_s": draft.lent_s, "lent_busy_s": draft.lent_busy_s,
        "computed_at": now, "computed_until": until,
    }
    return fields


def _lines(statement: Statement, draft: TeamDraft, carbon: dict) -> list[StatementLine]:
    if draft.errors:
        return []  # a failed draft shows its reason, not a partial bill
    figures = lines_carbon(draft.lines, carbon.get(statement.team_id))
    return [
        StatementLine(statement=statement, position=index, kind=line.kind,
                      gpu_class_id=line.gpu_class_id, gpu_class_name=line.gpu_class_name,
                      seconds=line.seconds, rate=line.rate, amount=line.amount,
                      reason=line.reason, adjustment_id=line.adjustment_id,
                      energy_kwh=f.energy_kwh, facility_energy_kwh=f.facility_kwh,
                      co2e_kg=f.co2e_kg, idle_energy_kwh=f.idle_kwh,
                      idle_co2e_kg=f.idle_co2e_kg)
        for index, (line, f) in enumerate(zip(draft.lines, figures, strict=True), start=1)
    ]


@transaction.atomic
def statements_draft_month(*, period: Period, now: datetime | None = None,
                           team_ids: list[int] | None = None) -> list[Statement]:
    """Draft or refresh the month's statement of every team with anything to bill (and of
    every team that already has one), or of the given teams; approved and sent statements
    are left as they are. The current month is drafted to date. A fixed number of queries
    whatever the number of teams."""
    now = whole_second(now or timezone.now())
    period_check(period=period, now=now)
    to_date = period.to_date(now)
    month = period.start.date()
    drafts = team_drafts(period=to_date, month=month, team_ids=team_ids)
    existing_ids = Statement.objects.filter(month=month).values_list("team_id", flat=True)
    wanted = set(team_ids) if team_ids is not None else (
        {team_id for team_id, d in drafts.items() if d.has_activity} | set(existing_ids))
    teams = list(Team.objects.select_for_update().filter(id__in=wanted).order_by("id"))
    existing = {s.team_id: s for s in Statement.objects.select_for_update()
                .filter(month=month, team_id__in=wanted)}
    refreshed, created = [], []
    carbon = carbon_by_team(period=to_date, team_ids=[team.id for team in teams])
    for team in teams:
        draft = drafts.get(team.id) or TeamDraft(team.id)
        fields = _draft_fields(draft, team, now, to_date.end)
        fields["energy_basis"] = carbon_basis(carbon.get(team.id))
        statement = existing.get(team.id)
        if statement is None:
            created.append(Statement(team=team, month=month, status=S.DRAFT, **fields))
        elif statement.status == S.DRAFT:
            for name, value in fields.items():
                setattr(statement, name, value)
            refreshed.append(statement)
    Statement.objects.bulk_create(created)
    if refreshed:
        Statement.objects.bulk_update(refreshed, DRAFT_FIELDS)
        StatementLine.objects.filter(statement__in=refreshed).delete()
    StatementLine.objects.bulk_create(
        [line for s in (*created, *refreshed)
         for line in _lines(s, drafts.get(s.team_id) or TeamDraft(s.team_id), carbon)])
    for statement in created:
        audit_record(actor=None, action="statement.draft", obj=statement, team=statement.team,
                     changes={"month": f"{month:%Y-%m}", "total": str(statement.total)})
    by_team = {**existing, **{s.team_id: s for s in created}}
    return [by_team[team.id] for team in teams if team.id in by_team]


def statement_draft(*, team: Team, period: Period, now: datetime | None = None) -> Statement:
    """The team's statement of the month, drafted or refreshed now (an approved or sent
    one is returned unchanged)."""
    return statements_draft_month(period=period, now=now, team_ids=[team.id])[0]


def statement_is_stale(statement: Statement, now: datetime) -> bool:
    """A draft older than the allowed age (and not yet covering its whole month)."""
    return statement.status == S.DRAFT and statement.computed_at < now - conf.draft_max_age()


def statement_current(*, team: Team, period: Period, now: datetime | None = None
                      ) -> Statement:
    """The team's statement of the month as it stands: drafted on request when missing or
    stale, otherwise as stored."""
    now = whole_second(now or timezone.now())
    period_check(period=period, now=now)
    statement = Statement.objects.filter(team=team, month=period.start.date()).first()
    if statement is None or statement_is_stale(statement, now):
        statement = statement_draft(team=team, period=period, now=now)
    return statement


def statements_current(*, period: Period, now: datetime | None = None) -> None:
    """Refresh the month's drafts when any is missing or stale (the organisation export)."""
    now = whole_second(now or timezone.now())
    period_check(period=period, now=now)
    statements = Statement.objects.filter(month=period.start.date())
    stale = statements.filter(status=S.DRAFT, computed_at__lt=now - conf.draft_max_age())
    if not statements.exists() or stale.exists():
        statements_draft_month(period=period, now=now)


def _approval_check(period: Period, now: datetime) -> None:
    opens = approval_opens(period)
    if now < opens:
        hours = conf.settlement_delay().total_seconds() / 3600
        raise Conflict(f"{period.start:%Y-%m} can be approved from {utc_label(opens)} "
                       f"({hours:g} h after the month ends, so late agent data is in).",
                       field="month")


def statement_number_next(*, month: date) -> str:
    """The next number of `month`'s statements, e.g. GQ-2026-11-0007: the month's approvals
    are serialised (a transaction-scoped lock per month), and the unique constraint stands
    behind it. Numbers are given at approval, so they run in the order of approval."""
    prefix = f"{conf.statement_number_prefix()}-{month:%Y-%m}-"
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)",
                           [NUMBER_LOCK, month.year * 100 + month.month])
    taken = Statement.objects.filter(number__startswith=prefix).values_list("number", flat=True)
    last = max((int(number[len(prefix):]) for number in taken
                if number[len(prefix):].isdigit()), default=0)
    return f"{prefix}{last + 1:04d}"


def _approve_locked(statement: Statement, by: User | None, now: datetime) -> Statement:
    if statement.status != S.DRAFT:
        raise Conflict(f"This statement is already {statement.status}.", field="status")
    if statement.error:
        raise Conflict(f"The draft failed and cannot be approved: {statement.error}",
                       field="error")
    statement.status, statement.approved_by, statement.approved_at = S.APPROVED, by, now
    statement.daily_usage = daily_usage_snapshot(statement)  # the PDF's chart, frozen too
    statement.number = statement.number or statement_number_next(month=statement.month)
    statement.save(update_fields=["status", "approved_by", "approved_at", "daily_usage",
                                  "number"])
    audit_record(actor=by, action="statement.approve", obj=statement, team=statement.team,
                 changes={"month": statement.period_label, "total": str(statement.total),
                          "currency": statement.currency, "number": statement.number})
    # the leads are mailed once this commits (`reports.tasks.statement_send_task`)
    task_enqueue_on_commit("reports.statement_send", statement_id=statement.pk)
    return statement


@transaction.atomic
def statement_approve(*, statement: Statement, by: User | None, now: datetime | None = None
                      ) -> Statement:
    """Approve one draft (admins, or the system): refused before the month's end plus the
    settlement delay, and for a failed draft. The draft is recomputed first, so what is
    frozen is the data as it stands at approval."""
    _require_admin(by)
    now = whole_second(now or timezone.now())
    period = month_period(statement.month)
    _approval_check(period, now)
    statements_draft_month(period=period, now=now, team_ids=[statement.team_id])
    locked = Statement.objects.select_for_update().get(pk=statement.pk)
    _approve_locked(locked, by, now)
    statement.refresh_from_db()
    return statement


@transaction.atomic
def statements_approve_month(*, period: Period, by: User | None, now: datetime | None = None,
                             confirmed: dict[int, Decimal] | None = None,
                             ) -> tuple[list[Statement], list[tuple[Statement, str]]]:
    """Approve every draft of the month that can be (after one refresh of all of them);
    returns (approved, [(statement, why not)]) for the failed ones. With `confirmed`
    (statement id → the total the admin saw and confirmed), exactly those are approved,
    each only if its refreshed total is still the one confirmed: approval is final, so
    nothing is approved that the admin did not see."""
    _require_admin(by)
    now = whole_second(now or timezone.now())
    period_check(period=period, now=now)
    _approval_check(period, now)
    statements_draft_month(period=period, now=now)
    approved, refused = [], []
    drafts = Statement.objects.select_for_update().filter(month=period.start.date(),
                                                          status=S.DRAFT)
    for statement in drafts.select_related("team").order_by("team_name"):
        if statement.error:
            refused.append((statement, statement.error))
        elif confirmed is not None and statement.pk not in confirmed:
            continue  # drafted after the admin looked: it waits for the next look
        elif confirmed is not None and confirmed[statement.pk] != statement.total:
            refused.append((statement, f"its total is now {statement.total} "
                            f"{statement.currency}, not the {confirmed[statement.pk]} "
                            "confirmed: look at it again"))
        else:
            approved.append(_approve_locked(statement, by, now))
    return approved, refused


@transaction.atomic
def statement_mark_sent(*, statement: Statement, at: datetime | None = None) -> Statement:
    """approved → sent, once the team's leads have all received it (stmtdocs' send
    service calls this); a sent statement is left as it is."""
    locked = Statement.objects.select_for_update().get(pk=statement.pk)
    if locked.status == S.SENT:
        return locked
    if locked.status != S.APPROVED:
        raise Conflict("Only an approved statement can be sent.", field="status")
    locked.status, locked.sent_at = S.SENT, whole_second(at or timezone.now())
    locked.save(update_fields=["status", "sent_at"])
    audit_record(actor=None, action="statement.sent", obj=locked, team=locked.team,
                 changes={"month": locked.period_label, "sent_at": locked.sent_at.isoformat()})
    return locked


def _amount_check(amount) -> Decimal:
    try:
        amount = Decimal(str(amount))
    except ArithmeticError as exc:
        raise DomainError("The amount must be a decimal number.", field="amount") from exc
    if not amount.is_finite() or amount != amount.quantize(Decimal("0.01")):
        raise DomainError("The amount has at most two decimal places.", field="amount")
    if amount == 0:
        raise DomainError("An adjustment of 0 changes nothing.", field="amount")
    if abs(amount) >= MAX_ADJUSTMENT:
        raise DomainError("The amount is out of range.", field="amount")
    return amount.quantize(Decimal("0.01"))


@transaction.atomic
def adjustment_add(*, team: Team, period: Period, amount, reason: str, by: User,
                   corrects: Statement | None = None, now: datetime | None = None
                   ) -> Adjustment:
    """Add a signed amount with a reason to a month not yet approved (admins), and
    refresh that month's draft so the line appears."""
    if by is None or not is_admin(by):
        raise PermissionDenied("Only admins can add adjustments.")
    now = whole_second(now or timezone.now())
    period_check(period=period, now=now)
    amount = _amount_check(amount)
    reason = (reason or "").strip()
    if not reason:
        raise DomainError("Say why: the reason is shown on the statement.", field="reason")
    Team.objects.select_for_update().filter(pk=team.pk).first()
    month = period.start.date()
    closed = Statement.objects.filter(team=team, month=month).exclude(status=S.DRAFT).first()
    if closed is not None:
        raise Conflict(f"{team.name}'s statement for {month:%Y-%m} is {closed.status}: add "
                       "the correction to an open month.", field="period")
    adjustment = Adjustment.objects.create(team=team, month=month, amount=amount,
                                           reason=reason, corrects=corrects, created_by=by,
                                           created_at=now)
    if corrects is not None:
        late_usage_check_settled(statement=corrects, amount=amount)
    audit_record(actor=by, action="statement.adjustment_add", obj=adjustment, team=team,
                 changes={"month": f"{month:%Y-%m}", "amount": str(amount),
                          "corrects": corrects.pk if corrects else None}, reason=reason)
    statement_draft(team=team, period=period, now=now)
    return adjustment


def late_usage_adjust(*, statement: Statement, by: User, now: datetime | None = None
                      ) -> Adjustment:
    """The one-click settlement of an approved month's late usage: an adjustment of the
    difference, line by line in its reason, on the first open month after it and not
    before last month."""
    now = whole_second(now or timezone.now())
    late = statement_late_usage(statement=statement)
    if late is None:
        raise Conflict("A draft has no late usage: it is recomputed instead.", field="status")
    if late.errors:
        raise Conflict("The month cannot be priced now: " + " ".join(late.errors))
    if not late.difference:
        raise Conflict(f"Nothing late to settle for {statement.period_label}.")
    closed = set(Statement.objects.filter(team_id=statement.team_id)
                 .exclude(status=S.DRAFT).values_list("month", flat=True))
    # Never a month before last: nobody reviews those any more, so a draft there would
    # never be approved.
    month = max(month_after(statement.month), month_previous(now).start.date())
    while month in closed:
        month = month_after(month)
    if month > now.date():
        raise Conflict("No open month to carry the adjustment yet.", field="period")
    details = "; ".join(
        f"{line.kind} {line.gpu_class_name} @ {_rate_text(line.rate)}: "
        f"{line.seconds_difference:+d} s, "
        f"{line.difference:+}" for line in late.changed_lines)
    return adjustment_add(team=statement.team, period=month_period(month),
                          amount=late.difference, by=by, corrects=statement, now=now,
                          reason=f"Late usage for {statement.period_label}: {details}")


def month_previous(now: datetime) -> Period:
    """The calendar month (UTC) before the one `now` is in."""
    return month_period(month_before(now.date().replace(day=1)))


def statements_refresh_open(*, now: datetime | None = None) -> dict[str, int]:
    """Recompute the open drafts: the current month to date, and last month while any of
    its statements is still a draft (or none exists yet). Idempotent."""
    now = whole_second(now or timezone.now())
    current = Period.month(now.year, now.month)
    refreshed = {f"{current.start:%Y-%m}": len(statements_draft_month(period=current, now=now))}
    previous = month_previous(now)
    statements = Statement.objects.filter(month=previous.start.date())
    if not statements.exists() or statements.filter(status=S.DRAFT).exists():
        refreshed[f"{previous.start:%Y-%m}"] = len(
            statements_draft_month(period=previous, now=now))
    return refreshed
