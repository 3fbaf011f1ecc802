"""Budgets per team and month (docs/budgets.md): which budget is in force, how far the
month to date and its forecast have gone into it, and the alerts, each threshold firing
once per month (a `BudgetAlert` row under a unique constraint), by mail to the team's
leads and to every active channel of the team through the notification outbox."""

import re
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Team, User
from accounts.permissions import can_act_for_team
from accounts.selectors import team_leads
from gpuquota.core.errors import DomainError, NotFound
from gpuquota.core.services import audit_record
from gpuquota.core.timeutil import hour_floor
from gpuquota.mail.conf import base_url
from gpuquota.mail.outbox import mail_send_later
from gpuquota.outbox.render import Message
from reports import conf
from reports.channels import channels_notify
from reports.forecast import Forecast, forecasts, month_of
from reports.models import Budget, BudgetAlert
from reports.pricing import round_half_up_int

DEFAULT_THRESHOLDS = [50, 80, 100]
Basis = BudgetAlert.Basis


def budget_in_force(*, team: Team, month: date) -> Budget | None:
    """The team's budget for `month` (first day): its latest row starting by then."""
    return (Budget.objects.filter(team=team, valid_from__lte=month)
            .order_by("-valid_from").first())


def budgets_of_month(*, month: date) -> list[Budget]:
    """Every team's budget in force in `month` (first day), by team name: the review's
    table for admins and finance."""
    found: dict[int, Budget] = {}
    for budget in (Budget.objects.filter(valid_from__lte=month).select_related("team")
                   .order_by("team_id", "-valid_from")):
        found.setdefault(budget.team_id, budget)
    return sorted(found.values(), key=lambda b: b.team.name)


def percent_of(part: Decimal, whole: Decimal) -> Fraction | None:
    return None if not whole else Fraction(part) / Fraction(whole) * 100


class ThresholdsMixin:
    """What a money budget's and a GPU-hour budget's month share: the percentages shown to
    people and the thresholds reached. The class gives `budget` (with `thresholds` and
    `forecast_threshold`), `actual_percent` and `forecast_percent`."""

    @property
    def actual_percent_shown(self) -> int | None:
        """For people: whole percent, half up (nothing is computed from it)."""
        value = self.actual_percent
        return None if value is None else round_half_up_int(value)

    @property
    def forecast_percent_shown(self) -> int | None:
        value = self.forecast_percent
        return None if value is None else round_half_up_int(value)

    def thresholds_crossed(self, to_date: Decimal, total: Decimal
                           ) -> list[tuple[str, int, Decimal]]:
        """(basis, threshold, figure) of every threshold reached: each of the budget's
        thresholds by what is used to date, and its forecast threshold by the forecast."""
        actual, forecast = self.actual_percent, self.forecast_percent
        found = [(Basis.ACTUAL, t, to_date) for t in self.budget.thresholds
                 if actual is not None and actual >= t]
        threshold = self.budget.forecast_threshold
        if threshold and forecast is not None and forecast >= threshold:
            found.append((Basis.FORECAST, threshold, total))
        return found


def threshold_tell(*, team: Team, key: str, message: Message, now: datetime) -> None:
    """Tell a team's leads (mail) and channels that a budget threshold was reached, under
    one key; inside the transaction that records the alert."""
    mail_send_later(template="budget_threshold", key=key,
                    recipients=team_leads(team=team, at=now),
                    context={"title": message.title, "text": message.text,
                             "facts": message.facts, "link": message.link,
                             "team_name": team.name})
    channels_notify(team=team, key=key, message=message, now=now)


@dataclass
class BudgetStatus(ThresholdsMixin):
    """A team's month against its budget: spend to date, forecast, their percentages, and
    the thresholds already fired."""

    team: Team
    budget: Budget | None
    forecast: Forecast | None
    alerts: list[BudgetAlert] = field(default_factory=list)

    @property
    def actual_percent(self) -> Fraction | None:
        if self.budget is None or self.forecast is None:
            return None
        return percent_of(self.forecast.to_date, self.budget.amount)

    @property
    def forecast_percent(self) -> Fraction | None:
        if self.budget is None or self.forecast is None:
            return None
        return percent_of(self.forecast.total, self.budget.amount)

    @property
    def currency(self) -> str:
        """The currency the figures are shown in."""
        if self.forecast and self.forecast.currency:
            return self.forecast.currency
        return self.budget.currency if self.budget else conf.default_currency()

    @property
    def currency_mismatch(self) -> bool:
        return bool(self.budget and self.forecast and self.forecast.currency
                    and self.forecast.currency != self.budget.currency)

    def crossed(self) -> list[tuple[str, int, Decimal]]:
        """(basis, threshold, figure) of every threshold the month has reached."""
        if self.budget is None or self.forecast is None or self.currency_mismatch:
            return []
        return self.thresholds_crossed(self.forecast.to_date, self.forecast.total)


def team_budget_status(*, team: Team, now: datetime | None = None) -> BudgetStatus:
    """The team's current month: to date, forecast, budget and the alerts fired; to date
    means to the last whole hour, which the rollups hold (the hour in progress would need
    its raw samples: thirty-odd queries more on every team page)."""
    now = hour_floor(now or timezone.now())
    month = month_of(now).start.date()
    forecast = forecasts(now=now, team_ids=[team.pk]).get(team.pk)
    alerts = list(BudgetAlert.objects.filter(team=team, month=month))
    return BudgetStatus(team=team, budget=budget_in_force(team=team, month=month),
                        forecast=forecast, alerts=alerts)


def thresholds_parse(raw) -> list[int]:
    if raw in (None, ""):
        return list(DEFAULT_THRESHOLDS)
    items = raw.split(",") if isinstance(raw, str) else raw
    try:
        values = sorted({int(str(item).strip()) for item in items if str(item).strip()})
    except (TypeError, ValueError) as exc:
        raise DomainError("Thresholds are whole percentages, e.g. 50,80,100.",
                          field="thresholds") from exc
    if not values or len(values) > 10 or any(not 1 <= v <= 1000 for v in values):
        raise DomainError("One to ten thresholds, each from 1 to 1000 (%).", field="thresholds")
    return values


def _amount(raw) -> Decimal:
    try:
        amount = Decimal(str(raw).strip())
    except (InvalidOperation, ValueError) as exc:
        raise DomainError("A budget is an amount such as 12000.00.", field="amount") from exc
    if not amount.is_finite() or amount < 0 or amount.as_tuple().exponent < -2 \
            or amount >= Decimal("1e12"):
        raise DomainError("A budget is zero or more, with at most two decimals.", field="amount")
    return amount.quantize(Decimal("0.01"))


def budget_set(*, team: Team, amount, by: User, valid_from: date | None = None,
               currency: str | None = None, thresholds=None,
               forecast_threshold: int | None = 100, action: str | None = None,
               now: datetime | None = None) -> Budget:
    """Set the team's budget from a month on (this month by default; never a past month):
    a team lead or an admin; audited. A second budget from the same month replaces it."""
    if not can_act_for_team(by, team):
        raise NotFound("No such team.")
    now = now or timezone.now()
    this_month = month_of(now).start.date()
    valid_from = valid_from or this_month
    if valid_from.day != 1 or valid_from < this_month:
        raise DomainError("A budget starts on the first of this month or a later one.",
                          field="valid_from")
    currency = (currency or conf.default_currency()).upper()
    if not re.fullmatch(r"[A-Z]{3}", currency):
        raise DomainError("A currency is a 3-letter ISO 4217 code.", field="currency")
    if forecast_threshold is not None and not 1 <= int(forecast_threshold) <= 1000:
        raise DomainError("From 1 to 1000 (%), or none.", field="forecast_threshold")
    action = action or Budget.Action.NOTIFY
    if action not in Budget.Action.values:
        raise DomainError("The action at 100 % is notify, refuse or preemptible_only.",
                          field="action")
    values = {"amount": _amount(amount), "currency": currency, "action": action,
              "thresholds": thresholds_parse(thresholds), "forecast_threshold": forecast_threshold,
              "created_by": by, "created_at": now.replace(microsecond=0)}
    with transaction.atomic():
        budget, created = Budget.objects.update_or_create(team=team, valid_from=valid_from,
                                                          defaults=values)
        audit_record(actor=by, action="budget.set", obj=budget, team=team, changes={
            "amount": str(budget.amount), "currency": currency,
            "valid_from": f"{valid_from:%Y-%m}", "thresholds": budget.thresholds,
            "forecast_threshold": forecast_threshold, "action": action})
    return budget


def _message(status: BudgetStatus, basis: str, threshold: int, figure: Decimal) -> Message:
    team, budget, forecast = status.team, status.budget, status.forecast
    what = "spent to date" if basis == Basis.ACTUAL else "forecast for the month's end"
    month = f"{forecast.month.start:%Y-%m}"
    return Message(
        event="budget.threshold",
        title=f"{team.name}: {threshold}% of the {month} budget {what}",
        text=(f"{team.name} has {what} {figure} {budget.currency} of its {budget.amount} "
              f"{budget.currency} budget for {month}."),
        facts=[("Spent to date", f"{forecast.to_date} {budget.currency}"),
               ("Forecast", f"{forecast.total} {budget.currency}"),
               ("Budget", f"{budget.amount} {budget.currency}"),
               ("Forecast basis", forecast.basis)],
        link=f"{base_url()}/teams/{team.slug}/",
        data={"team": team.slug, "period": month, "basis": basis, "threshold": threshold,
              "amount": str(figure), "to_date": str(forecast.to_date),
              "forecast": str(forecast.total), "budget": str(budget.amount),
              "currency": budget.currency})


def _fire(status: BudgetStatus, basis: str, threshold: int, figure: Decimal,
          now: datetime) -> BudgetAlert | None:
    month = status.forecast.month.start.date()
    try:
        with transaction.atomic():
            alert = BudgetAlert.objects.create(
                team=status.team, budget=status.budget, month=month, basis=basis,
                threshold=threshold, spent=figure, fired_at=now)
            key = f"budget:{status.team.pk}:{month:%Y-%m}:{basis}:{threshold}"
            message = _message(status, basis, threshold, figure)
            threshold_tell(team=status.team, key=key, message=message, now=now)
    except IntegrityError:  # fired already (a concurrent check)
        return None
    return alert


def budgets_check(*, now: datetime | None = None) -> list[BudgetAlert]:
    """Fire every threshold crossed this month and not fired yet, for every team with a
    budget in force: once per (team, month, basis, threshold)."""
    now = (now or timezone.now()).replace(microsecond=0)
    month = month_of(now).start.date()
    budgets = {}
    for budget in Budget.objects.filter(valid_from__lte=month).order_by("team_id",
                                                                          "-valid_from"):
        budgets.setdefault(budget.team_id, budget)
    if not budgets:
        return []
    fired_before = set(BudgetAlert.objects.filter(month=month, team_id__in=budgets)
                       .values_list("team_id", "basis", "threshold"))
    teams = Team.objects.in_bulk(list(budgets))
    figures = forecasts(now=now, team_ids=list(budgets))
    fired = []
    for team_id, budget in budgets.items():
        forecast = figures.get(team_id) or Forecast(team_id=team_id, now=now,
                                                    month=month_of(now))
        status = BudgetStatus(team=teams[team_id], budget=budget, forecast=forecast)
        for basis, threshold, figure in status.crossed():
            if (team_id, basis, threshold) not in fired_before:
                alert = _fire(status, basis, threshold, figure, now)
                if alert is not None:
                    fired.append(alert)
    return fired
