"""The budget API: a team's month to date, its month-end forecast, its budget and the
alerts fired (GET, the team's members and admins), and setting the budget (PUT, its leads
and admins). Errors in the one format of gpuquota.core.api."""

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import team_for_action, team_for_statements
from gpuquota.core.api import ERRORS
from reports.budget_actions import class_hours_refusal_preview, refusal_preview
from reports.budgets import BudgetStatus, budget_set, team_budget_status
from reports.energy import team_energy_kwh
from reports.forecast import RECENT_DAYS, month_of
from reports.hour_budgets import class_hours_budget_set, class_hours_statuses


class BudgetChangeSerializer(serializers.Serializer):
    amount = serializers.CharField(help_text="The monthly budget, e.g. \"12000.00\".")
    currency = serializers.CharField(required=False, help_text="ISO 4217; default the "
                                     "statements' (GPUQUOTA_CURRENCY).")
    thresholds = serializers.ListField(child=serializers.IntegerField(), required=False,
                                       help_text="Percent of spend to date; default [50, 80, 100].")
    forecast_threshold = serializers.IntegerField(required=False, allow_null=True,
                                                  help_text="Percent of the forecast (default "
                                                  "100); null: no forecast alert.")
    action = serializers.CharField(required=False, help_text="At 100 %: notify (default), "
                                   "refuse (new reservations that would exceed it) or "
                                   "preemptible_only (no new reservations once spent).")
    valid_from = serializers.DateField(required=False, help_text="The first day of the first "
                                       "month it applies to; default this month.")


class ClassHoursBudgetChangeSerializer(serializers.Serializer):
    gpu_class = serializers.CharField(help_text="The GPU class's name, e.g. \"H100-80GB\".")
    hours = serializers.CharField(help_text="GPU-hours of the class a month, e.g. \"720\".")
    thresholds = serializers.ListField(child=serializers.IntegerField(), required=False,
                                       help_text="Percent of the hours used to date; default "
                                       "[50, 80, 100].")
    forecast_threshold = serializers.IntegerField(required=False, allow_null=True,
                                                  help_text="Percent of the forecast (default "
                                                  "100); null: no forecast alert.")
    action = serializers.CharField(required=False, help_text="At 100 %: notify (default), "
                                   "refuse or preemptible_only, as the money budget's.")
    valid_from = serializers.DateField(required=False, help_text="The first day of the first "
                                       "month it applies to; default this month.")


def _class_hours_export(status: BudgetStatus, month, now) -> dict:
    statuses = class_hours_statuses(team=status.team, forecast=status.forecast,
                                    month=month.start.date())
    preview = class_hours_refusal_preview(team=status.team, statuses=statuses,
                                          forecast=status.forecast, now=now)
    return {"class_hours": [{"gpu_class": c.budget.gpu_class.name, "hours": str(c.budget.hours),
             "valid_from": f"{c.budget.valid_from:%Y-%m}", "thresholds": c.budget.thresholds,
             "forecast_threshold": c.budget.forecast_threshold, "action": c.budget.action,
             "to_date_hours": str(c.to_date), "forecast_hours": str(c.forecast),
             "actual_percent": c.actual_percent_shown,
             "forecast_percent": c.forecast_percent_shown,
             "alerts": [{"basis": a.basis, "threshold": a.threshold, "hours": str(a.hours),
                         "fired_at": f"{a.fired_at:%Y-%m-%dT%H:%M:%SZ}"} for a in c.alerts]}
            for c in statuses],
        "class_hours_refusal_preview": [
            {"reservation": r.reservation.pk, "gpu_class": r.reservation.gpu_class.name,
             "count": r.reservation.count, "start": f"{r.reservation.start:%Y-%m-%dT%H:%M:%SZ}",
             "status": r.reservation.status, "hours": str(r.hours),
             "running_total_hours": str(r.running_total)} for r in preview]}


def status_export(status: BudgetStatus) -> dict:
    forecast, budget = status.forecast, status.budget
    now = timezone.now().replace(microsecond=0)
    month = forecast.month if forecast else month_of(now)
    return {
        "team": status.team.slug, "period": f"{month.start:%Y-%m}", "currency": status.currency,
        "to_date": str(forecast.to_date) if forecast else "0.00",
        "forecast": None if forecast is None else {
            "amount": str(forecast.total), "to_date": str(forecast.to_date),
            "booked": str(forecast.booked), "booked_hours": str(forecast.booked_hours),
            "recent": str(forecast.recent), "recent_days": RECENT_DAYS,
            "recent_amount": str(forecast.recent_amount),
            "recent_counted": str(forecast.recent_counted), "basis": forecast.basis,
            "errors": forecast.errors, "as_of": f"{forecast.now:%Y-%m-%dT%H:%M:%SZ}"},
        "budget": None if budget is None else {
            "amount": str(budget.amount), "currency": budget.currency,
            "valid_from": f"{budget.valid_from:%Y-%m}", "thresholds": budget.thresholds,
            "forecast_threshold": budget.forecast_threshold, "action": budget.action},
        "refusal_preview": [
            {"reservation": r.reservation.pk, "gpu_class": r.reservation.gpu_class.name,
             "count": r.reservation.count, "start": f"{r.reservation.start:%Y-%m-%dT%H:%M:%SZ}",
             "status": r.reservation.status, "cost": str(r.cost),
             "running_total": str(r.running_total)}
            for r in refusal_preview(team=status.team, budget=budget, now=now)],
        "actual_percent": status.actual_percent_shown,
        "forecast_percent": status.forecast_percent_shown,
        "alerts": [{"basis": a.basis, "threshold": a.threshold, "amount": str(a.spent),
                    "fired_at": f"{a.fired_at:%Y-%m-%dT%H:%M:%SZ}"} for a in status.alerts],
        "energy_kwh": str(team_energy_kwh(team_id=status.team.pk, period=month.to_date(now))),
        **_class_hours_export(status, month, now),
    }


class TeamBudgetView(APIView):
    """A team's month to date (the draft's total), month-end forecast with its basis,
    budget, alerts fired this month and energy to date."""

    @extend_schema(responses={200: dict, 404: ERRORS[404]}, operation_id="team_budget")
    def get(self, request, slug: str):
        team = team_for_statements(request.user, slug)
        return Response(status_export(team_budget_status(team=team)))

    @extend_schema(request=BudgetChangeSerializer,
                   responses={200: dict, 400: ERRORS[400], 403: ERRORS[403], 404: ERRORS[404]},
                   operation_id="team_budget_set",
                   description="Leads and admins: the team's monthly budget from a month on "
                   "(this month by default). Audited.")
    def put(self, request, slug: str):
        team = team_for_action(request.user, slug)
        data = BudgetChangeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        budget_set(team=team, amount=values["amount"], by=request.user,
                   currency=values.get("currency"), thresholds=values.get("thresholds"),
                   forecast_threshold=values.get("forecast_threshold", 100),
                   valid_from=values.get("valid_from"), action=values.get("action"))
        return Response(status_export(team_budget_status(team=team)))


class TeamClassHoursBudgetView(APIView):
    """Set a team's monthly GPU-hours of one class (leads and admins); the answer is the
    budget API's GET, whose `class_hours` lists the class budgets in force."""

    @extend_schema(request=ClassHoursBudgetChangeSerializer,
                   responses={200: dict, 400: ERRORS[400], 403: ERRORS[403], 404: ERRORS[404]},
                   operation_id="team_class_hours_budget_set",
                   description="Leads and admins: the team's GPU-hours of a class a month, "
                   "from a month on (this month by default), with thresholds and the action "
                   "at 100 %. Audited.")
    def put(self, request, slug: str):
        team = team_for_action(request.user, slug)
        data = ClassHoursBudgetChangeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        class_hours_budget_set(team=team, gpu_class=values["gpu_class"], hours=values["hours"],
                               by=request.user, thresholds=values.get("thresholds"),
                               forecast_threshold=values.get("forecast_threshold", 100),
                               valid_from=values.get("valid_from"), action=values.get("action"))
        return Response(status_export(team_budget_status(team=team)))
