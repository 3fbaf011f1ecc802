"""A budget's action at 100 % (docs/budgets.md, "Actions at 100 %"): reached from the
reservations' services through the `RESERVATION_REQUESTED` hook (gpuquota.core.contributions),
never by an import from below.

- notify (the default): nothing is refused;
- refuse: a new reservation is refused when the month's forecast plus what the new
  reservation's reserved time in that month costs (at the reserved rate in force now)
  would exceed the budget; for a month after this one, what is booked in it stands in for
  the forecast;
- preemptible-only: once the month's spend to date has reached the budget, no new
  reservation with time in the rest of the month; the team still borrows lent GPUs.

Running work is never touched: only a request for a new reservation is refused."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from django.db.models import Q

from accounts.models import Team
from gpuquota.core.errors import Conflict
from gpuquota.core.timeutil import Period
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Reservation
from reports.budgets import budget_in_force
from reports.forecast import forecasts, hours_rounded, month_of
from reports.hour_budgets import class_hours_budgets_in_force
from reports.models import Budget
from reports.pricing import line_amount

Action = Budget.Action
LOOKED_AT = (Reservation.Status.PENDING, Reservation.Status.SCHEDULED, Reservation.Status.ACTIVE)


class BudgetExceeded(Conflict):
    code = "budget_exceeded"


def _rate(gpu_class_id: int, at: datetime) -> RateCard | None:
    return (RateCard.objects.filter(Q(valid_until__isnull=True) | Q(valid_until__gt=at),
                                    gpu_class_id=gpu_class_id, valid_from__lte=at)
            .order_by("-valid_from").first())


def reserved_cost(*, gpu_class_id: int, count: int, start: datetime, end: datetime,
                  window: Period, now: datetime) -> Decimal:
    """The reserved time of `count` GPUs over [start, end) inside `window`, at the reserved
    rate in force now (or at its start when none is), rounded once."""
    seconds = count * window.clip(max(start, window.start), end)
    if not seconds:
        return Decimal("0.00")
    card = _rate(gpu_class_id, now) or _rate(gpu_class_id, max(start, window.start))
    return line_amount(seconds * Fraction(card.reserved_rate)) if card else Decimal("0.00")


def _months(start: datetime, end: datetime, now: datetime) -> list[Period]:
    month, found = month_of(max(start, now)), []
    while month.start < end:
        found.append(month)
        month = month_of(month.end)
    return found


def _committed(team: Team, month: Period, now: datetime) -> tuple[Decimal, Decimal]:
    """(spent to date, committed) for the month: this month's forecast; for a later month
    the reserved time booked in it."""
    if month.start <= now:
        forecast = forecasts(now=now, team_ids=[team.pk]).get(team.pk)
        return (forecast.to_date, forecast.total) if forecast else (Decimal(0), Decimal(0))
    booked = sum((reserved_cost(gpu_class_id=r.gpu_class_id, count=r.count, start=r.start,
                                end=r.end, window=month, now=now)
                  for r in Reservation.objects.filter(
                      team=team, status__in=LOOKED_AT[1:], start__lt=month.end,
                      end__gt=month.start)), Decimal("0.00"))
    return Decimal("0.00"), booked


def _booked_class_hours(team: Team, gpu_class_id: int, month: Period) -> Decimal:
    """The class's GPU-hours booked in a later month (what stands in for its forecast)."""
    seconds = sum(r.count * month.clip(max(r.start, month.start), r.end)
                  for r in Reservation.objects.filter(
                      team=team, gpu_class_id=gpu_class_id, status__in=LOOKED_AT[1:],
                      start__lt=month.end, end__gt=month.start))
    return hours_rounded(Fraction(seconds, 3600))


def class_hours_refusal(*, team: Team, gpu_class, count: int, start: datetime, end: datetime,
                        now: datetime) -> str | None:
    """Why the team's GPU-hour budget of the reservation's class refuses it, or None: the
    same rules as the money budget's, in GPU-hours of the class."""
    now = now.replace(microsecond=0)
    for month in _months(start, end, now):
        budgets = class_hours_budgets_in_force(month=month.start.date(), team_ids=[team.pk])
        budget = next((b for b in budgets.get(team.pk, []) if b.gpu_class_id == gpu_class.pk),
                      None)
        if budget is None or budget.action == Action.NOTIFY:
            continue
        window = Period(max(now, month.start), month.end)
        seconds = count * window.clip(max(start, window.start), end)
        if not seconds:
            continue
        if month.start <= now:
            forecast = forecasts(now=now, team_ids=[team.pk]).get(team.pk)
            used = forecast.hours_to_date(gpu_class.pk) if forecast else Decimal("0.00")
            committed = forecast.hours_total(gpu_class.pk) if forecast else Decimal("0.00")
        else:
            used, committed = Decimal("0.00"), _booked_class_hours(team, gpu_class.pk, month)
        label, name = f"{month.start:%Y-%m}", gpu_class.name
        if budget.action == Action.PREEMPTIBLE_ONLY:
            if used >= budget.hours:
                return (f"{team.name} has used {used} of its {budget.hours} {name} GPU-hours "
                        f"for {label}: it runs on preemptible (borrowed) GPUs only until the "
                        f"month ends; no new {name} reservations.")
            continue
        hours = hours_rounded(Fraction(seconds, 3600))
        if committed + hours > budget.hours:
            return (f"Refused by {team.name}'s {name} GPU-hour budget for {label}: "
                    f"{committed} GPU-hours forecast + {hours} for this reservation would "
                    f"exceed the {budget.hours} GPU-hour budget.")
    return None


def budget_refusal(*, team: Team, gpu_class, count: int, start: datetime, end: datetime,
                   now: datetime) -> str | None:
    """Why the team's budget (in money, or in GPU-hours of the class) refuses this new
    reservation, or None."""
    now = now.replace(microsecond=0)
    for month in _months(start, end, now):
        budget = budget_in_force(team=team, month=month.start.date())
        if budget is None or budget.action == Action.NOTIFY:
            continue
        window = Period(max(now, month.start), month.end)
        if not window.clip(start, end):
            continue
        spent, committed = _committed(team, month, now)
        label = f"{month.start:%Y-%m}"
        if budget.action == Action.PREEMPTIBLE_ONLY:
            if spent >= budget.amount:
                return (f"{team.name} has spent {spent} of its {budget.amount} "
                        f"{budget.currency} budget for {label}: it runs on preemptible "
                        "(borrowed) GPUs only until the month ends; no new reservations.")
            continue
        cost = reserved_cost(gpu_class_id=gpu_class.pk, count=count, start=start, end=end,
                             window=window, now=now)
        if cost and committed + cost > budget.amount:
            return (f"Refused by {team.name}'s budget for {label}: {committed} "
                    f"{budget.currency} forecast + {cost} for this reservation would exceed "
                    f"the {budget.amount} {budget.currency} budget.")
    return class_hours_refusal(team=team, gpu_class=gpu_class, count=count, start=start,
                               end=end, now=now)


def reservation_budget_check(*, team: Team, gpu_class, count: int, start: datetime,
                             end: datetime, now: datetime) -> None:
    """The `RESERVATION_REQUESTED` hook: raise when the budget refuses it."""
    reason = budget_refusal(team=team, gpu_class=gpu_class, count=count, start=start,
                            end=end, now=now)
    if reason:
        raise BudgetExceeded(reason, field="count")


@dataclass
class Refusal:
    reservation: Reservation
    cost: Decimal
    running_total: Decimal


def refusal_preview(*, team: Team, budget: Budget | None, now: datetime) -> list[Refusal]:
    """The team's bookings still to come this month (pending or scheduled) that the budget's
    action would refuse if they were requested now, in order of start: for refuse, to date
    + recent use + the running reservations' time to come, then each booking to come added
    in turn, those that take it over the budget; for preemptible-only, all once spent."""
    if budget is None or budget.action == Action.NOTIFY:
        return []
    now = now.replace(microsecond=0)
    month = month_of(now)
    window = Period(now, month.end)
    forecast = forecasts(now=now, team_ids=[team.pk]).get(team.pk)
    to_date = forecast.to_date if forecast else Decimal("0.00")
    running = to_date + (forecast.recent if forecast else Decimal("0.00"))
    bookings = (Reservation.objects.filter(team=team, status__in=LOOKED_AT, start__lt=month.end,
                                           end__gt=now)
                .select_related("gpu_class").order_by("start", "pk"))
    refused = []
    for reservation in bookings:
        cost = reserved_cost(gpu_class_id=reservation.gpu_class_id, count=reservation.count,
                             start=reservation.start, end=reservation.end, window=window,
                             now=now)
        running += cost
        if reservation.start < now:  # running: counted, never refused
            continue
        over = (to_date >= budget.amount if budget.action == Action.PREEMPTIBLE_ONLY
                else running > budget.amount)
        if over:
            refused.append(Refusal(reservation=reservation, cost=cost, running_total=running))
    return refused


@dataclass
class HoursRefusal:
    reservation: Reservation
    hours: Decimal
    running_total: Decimal


def class_hours_refusal_preview(*, team: Team, statuses: list, forecast, now: datetime
                                ) -> list[HoursRefusal]:
    """The GPU-hour budgets' preview, as `refusal_preview` for money: per class with a
    refusing action, the team's bookings of the class still to come this month that it
    would refuse if requested now. For refuse: the class's hours to date + recent use +
    the running reservations' hours to come, then each booking to come added in order of
    start, those that take it over; for preemptible-only, all once the hours are used.
    `statuses`: `hour_budgets.class_hours_statuses` of this month."""
    acting = {s.budget.gpu_class_id: s for s in statuses if s.budget.action != Action.NOTIFY}
    if not acting:
        return []
    now = now.replace(microsecond=0)
    month = month_of(now)
    window = Period(now, month.end)
    running = {class_id: Fraction(status.to_date) + (
        forecast.class_hours_recent.get(class_id, Fraction(0)) if forecast else 0)
        for class_id, status in acting.items()}
    refused = []
    for reservation in (Reservation.objects.filter(
            team=team, gpu_class_id__in=list(acting), status__in=LOOKED_AT,
            start__lt=month.end, end__gt=now).select_related("gpu_class")
            .order_by("start", "pk")):
        status = acting[reservation.gpu_class_id]
        hours = Fraction(reservation.count * window.clip(max(reservation.start, now),
                                                         reservation.end), 3600)
        running[reservation.gpu_class_id] += hours
        if reservation.start < now:  # running: counted, never refused
            continue
        over = (status.to_date >= status.budget.hours
                if status.budget.action == Action.PREEMPTIBLE_ONLY
                else running[reservation.gpu_class_id] > status.budget.hours)
        if over:
            refused.append(HoursRefusal(reservation=reservation, hours=hours_rounded(hours),
                                        running_total=hours_rounded(
                                            running[reservation.gpu_class_id])))
    return refused
