"""Budgets in GPU-hours per class (docs/budgets.md, "GPU-hour budgets per class"): a team's
monthly GPU-hours of one class, with the money budgets' effective dates, thresholds (each
firing once per team, class, month, basis and threshold) and action at 100 %. The hours
are the forecast's (`reports.forecast`): chargeable GPU-hours to date (reserved less
failed, on-demand and borrowed), and to date + booked + recent use for the month's end."""

from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Team, User
from accounts.permissions import can_act_for_team
from gpuquota.core.errors import DomainError, NotFound
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import GpuClass
from gpuquota.mail.conf import base_url
from gpuquota.outbox.render import Message
from reports.budgets import (
    ThresholdsMixin,
    budgets_check,
    percent_of,
    threshold_tell,
    thresholds_parse,
)
from reports.forecast import Forecast, forecasts, month_of
from reports.models import Budget, BudgetAlert, ClassHoursAlert, ClassHoursBudget

Basis = BudgetAlert.Basis


def class_hours_budgets_in_force(*, month: date, team_ids: list[int] | None = None
                                 ) -> dict[int, list[ClassHoursBudget]]:
    """Per team: its class budgets in force in `month` (first day), one per class, by class
    name (one query)."""
    rows = ClassHoursBudget.objects.filter(valid_from__lte=month).select_related("gpu_class",
                                                                               "team")
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    latest: dict[tuple[int, int], ClassHoursBudget] = {}
    for budget in rows.order_by("team_id", "gpu_class_id", "-valid_from"):
        latest.setdefault((budget.team_id, budget.gpu_class_id), budget)
    found: dict[int, list[ClassHoursBudget]] = {}
    for (team_id, _class_id), budget in sorted(latest.items(),
                                               key=lambda item: item[1].gpu_class.name):
        found.setdefault(team_id, []).append(budget)
    return found


@dataclass
class ClassHoursStatus(ThresholdsMixin):
    """One class budget's month: GPU-hours used to date and forecast, and the alerts fired."""

    budget: ClassHoursBudget
    to_date: Decimal
    forecast: Decimal
    alerts: list[ClassHoursAlert] = field(default_factory=list)

    @property
    def actual_percent(self) -> Fraction | None:
        return percent_of(self.to_date, self.budget.hours)

    @property
    def forecast_percent(self) -> Fraction | None:
        return percent_of(self.forecast, self.budget.hours)

    def crossed(self) -> list[tuple[str, int, Decimal]]:
        """(basis, threshold, GPU-hours) of every threshold the month has reached."""
        return self.thresholds_crossed(self.to_date, self.forecast)


def class_hours_statuses(*, team: Team, forecast: Forecast | None, month: date,
                         budgets: list[ClassHoursBudget] | None = None,
                         alerts: list[ClassHoursAlert] | None = None) -> list[ClassHoursStatus]:
    """The team's class budgets in force in `month` against the forecast's GPU-hours."""
    if budgets is None:
        budgets = class_hours_budgets_in_force(month=month, team_ids=[team.pk]).get(team.pk, [])
    if alerts is None:
        alerts = list(ClassHoursAlert.objects.filter(team=team, month=month)) if budgets else []
    statuses = []
    for budget in budgets:
        class_id = budget.gpu_class_id
        statuses.append(ClassHoursStatus(
            budget=budget,
            to_date=forecast.hours_to_date(class_id) if forecast else Decimal("0.00"),
            forecast=forecast.hours_total(class_id) if forecast else Decimal("0.00"),
            alerts=[a for a in alerts if a.gpu_class_id == class_id]))
    return statuses


def _hours(raw) -> Decimal:
    try:
        hours = Decimal(str(raw).strip())
    except (InvalidOperation, ValueError) as exc:
        raise DomainError("A GPU-hour budget is a number of hours such as 720.",
                          field="hours") from exc
    if not hours.is_finite() or hours < 0 or hours.as_tuple().exponent < -2 \
            or hours >= Decimal("1e10"):
        raise DomainError("GPU-hours are zero or more, with at most two decimals.",
                          field="hours")
    return hours.quantize(Decimal("0.01"))


def class_hours_budget_set(*, team: Team, gpu_class: str | GpuClass, hours, by: User,
                           valid_from: date | None = None, thresholds=None,
                           forecast_threshold: int | None = 100, action: str | None = None,
                           now: datetime | None = None) -> ClassHoursBudget:
    """Set the team's monthly GPU-hours of a class from a month on (this month by default;
    never a past month): a team lead or an admin; audited. Set again for the same month
    and class, it replaces that row."""
    if not can_act_for_team(by, team):
        raise NotFound("No such team.")
    if not isinstance(gpu_class, GpuClass):
        gpu_class = GpuClass.objects.filter(name=str(gpu_class).strip()).first()
        if gpu_class is None:
            raise DomainError("No such GPU class.", field="gpu_class")
    now = now or timezone.now()
    this_month = month_of(now).start.date()
    valid_from = valid_from or this_month
    if valid_from.day != 1 or valid_from < this_month:
        raise DomainError("A budget starts on the first of this month or a later one.",
                          field="valid_from")
    if forecast_threshold is not None and not 1 <= int(forecast_threshold) <= 1000:
        raise DomainError("From 1 to 1000 (%), or none.", field="forecast_threshold")
    action = action or Budget.Action.NOTIFY
    if action not in Budget.Action.values:
        raise DomainError("The action at 100 % is notify, refuse or preemptible_only.",
                          field="action")
    values = {"hours": _hours(hours), "action": action, "thresholds": thresholds_parse(thresholds),
              "forecast_threshold": forecast_threshold, "created_by": by,
              "created_at": now.replace(microsecond=0)}
    with transaction.atomic():
        budget, _created = ClassHoursBudget.objects.update_or_create(
            team=team, gpu_class=gpu_class, valid_from=valid_from, defaults=values)
        audit_record(actor=by, action="budget.class_hours_set", obj=budget, team=team, changes={
            "gpu_class": gpu_class.name, "hours": str(budget.hours),
            "valid_from": f"{valid_from:%Y-%m}", "thresholds": budget.thresholds,
            "forecast_threshold": forecast_threshold, "action": action})
    return budget


def _message(team: Team, status: ClassHoursStatus, basis: str, threshold: int,
             figure: Decimal, month: str) -> Message:
    budget, name = status.budget, status.budget.gpu_class.name
    what = "used to date" if basis == Basis.ACTUAL else "forecast for the month's end"
    return Message(
        event="budget.threshold",
        title=f"{team.name}: {threshold}% of the {month} {name} GPU-hour budget {what}",
        text=(f"{team.name} has {what} {figure} of its {budget.hours} {name} GPU-hours "
              f"for {month}."),
        facts=[("GPU class", name), ("Used to date", f"{status.to_date} GPU-hours"),
               ("Forecast", f"{status.forecast} GPU-hours"),
               ("Budget", f"{budget.hours} GPU-hours")],
        link=f"{base_url()}/teams/{team.slug}/",
        data={"team": team.slug, "period": month, "basis": basis, "threshold": threshold,
              "unit": "gpu_hours", "gpu_class": name, "hours": str(figure),
              "to_date_hours": str(status.to_date), "forecast_hours": str(status.forecast),
              "budget_hours": str(budget.hours)})


def _fire(team: Team, status: ClassHoursStatus, basis: str, threshold: int, figure: Decimal,
          month: date, now: datetime) -> ClassHoursAlert | None:
    try:
        with transaction.atomic():
            alert = ClassHoursAlert.objects.create(
                team=team, gpu_class_id=status.budget.gpu_class_id, budget=status.budget,
                month=month, basis=basis, threshold=threshold, hours=figure, fired_at=now)
            key = (f"budget-hours:{team.pk}:{status.budget.gpu_class_id}:{month:%Y-%m}:"
                   f"{basis}:{threshold}")
            message = _message(team, status, basis, threshold, figure, f"{month:%Y-%m}")
            threshold_tell(team=team, key=key, message=message, now=now)
    except IntegrityError:  # fired already (a concurrent check)
        return None
    return alert


def class_hours_check(*, now: datetime | None = None) -> list[ClassHoursAlert]:
    """Fire every class GPU-hour threshold crossed this month and not fired yet: once per
    (team, class, month, basis, threshold)."""
    now = (now or timezone.now()).replace(microsecond=0)
    month = month_of(now).start.date()
    budgets = class_hours_budgets_in_force(month=month)
    if not budgets:
        return []
    alerts = list(ClassHoursAlert.objects.filter(month=month, team_id__in=budgets))
    teams = Team.objects.in_bulk(list(budgets))
    figures = forecasts(now=now, team_ids=list(budgets))
    fired = []
    for team_id, team_budgets in budgets.items():
        team = teams[team_id]
        for status in class_hours_statuses(team=team, forecast=figures.get(team_id),
                                           month=month, budgets=team_budgets, alerts=alerts):
            done = {(a.basis, a.threshold) for a in status.alerts}
            for basis, threshold, figure in status.crossed():
                if (basis, threshold) not in done:
                    alert = _fire(team, status, basis, threshold, figure, month, now)
                    if alert is not None:
                        fired.append(alert)
    return fired


def all_budgets_check(*, now: datetime | None = None
                      ) -> tuple[list[BudgetAlert], list[ClassHoursAlert]]:
    """The hourly check: every money budget's and GPU-hour budget's thresholds crossed this
    month and not fired yet (each once)."""
    return budgets_check(now=now), class_hours_check(now=now)
