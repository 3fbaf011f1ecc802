"""The borrowers' digest: each team whose work ran on GPUs taken back is told once, in one
mail per lead per run and on its channels, which GPUs were returned and when (never one
message per job). The mail and the channel messages are queued in the outboxes in the
transaction that marks the loans told, so a worker killed mid-run leaves all or none."""

from collections import defaultdict
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from accounts.selectors import team_leads
from gpuquota.core.fields import whole_second
from gpuquota.lending.conf import lend_return_notice_s
from gpuquota.lending.idle import borrower_team_ids
from gpuquota.lending.selectors import loan_candidate
from gpuquota.lending.told import borrowers_preempted_tell
from gpuquota.mail.outbox import mail_send_later
from gpuquota.reservations.models import Loan

#: Borrower processes this long before a return count as running at it (one sample window).
RUNNING_AT_RETURN = timedelta(seconds=600)
#: Returns older than this are marked without mail (a site turning mail on late).
TOO_OLD = timedelta(days=2)


def _settled(now: datetime):
    """Returned loans whose borrowers are known: seen free, or past the notice."""
    notice = timedelta(seconds=lend_return_notice_s())
    return (Loan.objects.filter(returned_at__isnull=False, preempt_notified_at__isnull=True,
                                returned_at__lte=now)
            .select_related("assignment__reservation__team", "gpu__node__cluster")
            .order_by("returned_at", "pk")), notice


def loan_borrowers(loan: Loan, *, now: datetime) -> set[int | None]:
    """The teams (None: unattributed) whose processes ran on the GPU at its return."""
    notice = timedelta(seconds=lend_return_notice_s())
    since = max(loan.lent_from, loan.returned_at - RUNNING_AT_RETURN)
    until = loan.freed_at or min(now, loan.returned_at + notice)
    return borrower_team_ids(candidate=loan_candidate(loan, since=since),
                             until=max(until, loan.returned_at))


def preemption_digest_send(*, now: datetime | None = None) -> dict:
    """Queue one digest per borrowing team's lead for the settled returns not yet told."""
    now = whole_second(now or timezone.now())
    loans, notice = _settled(now)
    by_team: dict[int, list[Loan]] = defaultdict(list)
    done: list[int] = []
    for loan in loans:
        if loan.freed_at is None and loan.returned_at + notice > now:
            continue
        done.append(loan.pk)
        if loan.returned_at < now - TOO_OLD:
            continue
        for team_id in loan_borrowers(loan, now=now) - {None}:
            by_team[team_id].append(loan)
    queued = 0
    with transaction.atomic():
        for team in Team.objects.filter(pk__in=by_team).order_by("pk"):
            rows = by_team[team.pk]
            key = f"lending-preempted-{team.pk}-{rows[0].pk}-{rows[-1].pk}-{len(rows)}"
            queued += mail_send_later(
                template="lending_preempted", recipients=team_leads(team=team, at=now),
                context=_context(team, rows), key=key)
            borrowers_preempted_tell(team=team, loans=rows, key=key)
        Loan.objects.filter(pk__in=done, preempt_notified_at__isnull=True).update(
            preempt_notified_at=now)
    return {"loans": len(done), "teams": len(by_team), "queued": queued}


def _context(team: Team, loans: list[Loan]) -> dict:
    return {"team_name": team.name, "team_slug": team.slug, "returns": [
        {"gpu": f"{loan.gpu.node.hostname}/{loan.gpu.index}", "uuid": loan.gpu.uuid,
         "cluster": loan.gpu.node.cluster.name, "owner": loan.assignment.reservation.team.name,
         "returned_at": loan.returned_at, "freed_at": loan.freed_at,
         "reason": loan.get_end_reason_display()} for loan in loans]}
