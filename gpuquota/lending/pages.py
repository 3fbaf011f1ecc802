"""What the lending pages show: the team page's section (lent and borrowed GPUs, opt-outs
and their controls for leads) and the admin's page (pool, loans, returns)."""

from datetime import datetime, timedelta

from accounts.models import Team
from gpuquota.lending.conf import lend_after_idle_s, lend_return_notice_s, lending_enabled
from gpuquota.lending.forms import OptOutForm
from gpuquota.lending.selectors import (
    loans_list,
    optouts_list,
    returns_list,
    team_loans,
    time_to_return,
)
from gpuquota.reservations.models import Reservation

OPEN = (Reservation.Status.SCHEDULED, Reservation.Status.ACTIVE)
#: Loans of the pool listed on the admin's page (by cluster, node and GPU): rendering them
#: all took 1 s at 10,000 GPUs (1,257 lent) and would grow with the fleet (issue 34).
POOL_SHOWN = 200


def _open_reservations(team: Team) -> list[Reservation]:
    return list(Reservation.objects.filter(team=team, status__in=OPEN)
                .select_related("gpu_class").order_by("start", "pk"))


def optout_form(*, team: Team, data=None,
                reservations: list[Reservation] | None = None) -> OptOutForm:
    """The opt-out form over the team's open reservations (given, or read) and their
    classes."""
    if reservations is None:
        reservations = _open_reservations(team)
    classes = sorted({r.gpu_class for r in reservations}, key=lambda c: c.name)
    return OptOutForm(data, reservations=reservations, gpu_classes=classes)


def team_lending_context(*, team: Team, can_act: bool, now: datetime) -> dict | None:
    """The team page's lending section; None when there is nothing to show or do."""
    loans = team_loans(team=team, now=now)
    optouts = list(optouts_list(teams=Team.objects.filter(pk=team.pk), live_only=True))
    reservations = _open_reservations(team) if can_act else []
    form = optout_form(team=team, reservations=reservations) if can_act else None
    has_choices = form is not None and bool(form.fields["target"].choices)
    if not (loans.lent or loans.borrowed or optouts or has_choices):
        return None
    # the active ones of the open reservations the form lists (one query for both)
    active = [r for r in reservations if r.status == Reservation.Status.ACTIVE]
    return {"lending": {"lent": loans.lent, "borrowed": loans.borrowed, "optouts": optouts,
                        "active": active,
                        "form": form if has_choices else None, "enabled": lending_enabled(),
                        "idle_s": lend_after_idle_s(), "notice_s": lend_return_notice_s()}}


def admin_lending_context(*, now: datetime, days: int) -> dict:
    """The admin's lending page: the pool (lent now), returns waiting for their GPU to be
    free, recent returns with the time-to-return over `days`, live opt-outs."""
    start = now - timedelta(days=days)
    pool = loans_list(state="open")
    return {"pool": list(pool.order_by("gpu__node__cluster__name", "gpu__node__hostname",
                                       "gpu__index")[:POOL_SHOWN]),
            "pool_count": pool.count(), "pool_shown": POOL_SHOWN,
            "returning": list(loans_list(state="returning")),
            "returns": [{"loan": loan, "ttr_s": int((loan.freed_at - loan.returned_at)
                                                    .total_seconds())}
                        for loan in returns_list(start=start, end=now)[:200]],
            "figures": time_to_return(start=start, end=now), "days": days,
            "optouts": list(optouts_list(live_only=True)), "enabled": lending_enabled(),
            "idle_s": lend_after_idle_s(), "notice_s": lend_return_notice_s()}
