"""What reports adds to the pages of the apps below it and to the demo
(`gpuquota.core.contributions`): the team page's statements, the demo's drafts of last
month, the statements to approve or still unsent on the admin's home page, and the team
channels every app's team events reach (`TEAM_EVENT`), and the admins' channels their
admin events reach (`ADMIN_EVENT`); a user's own channels on their profile page, which
their events reach (`USER_EVENT`)."""

from gpuquota.core.sections import Section
from gpuquota.inventory.models import GpuClass
from gpuquota.outbox.events import TEAM_EVENTS, USER_EVENTS
from reports.admin_channels import admin_channels_event
from reports.attention import statements_attention
from reports.budget_actions import (
    class_hours_refusal_preview,
    refusal_preview,
    reservation_budget_check,
)
from reports.budgets import team_budget_status
from reports.channels import channel_deliveries, channels_team_event
from reports.demo import demo_statements_seed
from reports.energy import team_energy_kwh
from reports.forecast import month_of
from reports.hour_budgets import class_hours_statuses
from reports.models import Budget
from reports.review import team_statements
from reports.user_channels import user_channel_deliveries, user_channels_event


def team_statements_context(*, team) -> dict:
    return {"team_statements": team_statements(team=team)}


def team_budget_context(*, team, can_act, now) -> dict:
    """The month to date, its forecast and the budget; channels and deliveries for those
    who may change them."""
    status = team_budget_status(team=team, now=now)
    month = month_of(now.replace(microsecond=0))
    class_hours = class_hours_statuses(team=team, forecast=status.forecast,
                                       month=month.start.date())
    context = {"budget_status": status, "budget_actions": Budget.Action.choices,
               "class_hours": class_hours,
               "class_hours_preview": class_hours_refusal_preview(
                   team=team, statuses=class_hours, forecast=status.forecast, now=now),
               "refusal_preview": refusal_preview(team=team, budget=status.budget, now=now),
               "energy_kwh": team_energy_kwh(team_id=team.pk, period=month.to_date(now))}
    if can_act:
        context |= {"gpu_classes": GpuClass.objects.order_by("name"),
                    "channels": team.channels.filter(active=True),
                    "channel_events": TEAM_EVENTS,
                    "deliveries": channel_deliveries(team=team)}
    return context


def profile_channels_context(*, user) -> dict:
    """The viewer's own channels and their deliveries."""
    return {"my_channels": user.channels.filter(active=True), "channel_events": USER_EVENTS,
            "my_deliveries": user_channel_deliveries(user=user)}


PAGE_SECTIONS = [
    Section(page="team", slot="main", template="reports/_team_budget.html",
            context=team_budget_context, order=35),
    Section(page="team", slot="main", template="reports/_team_statements.html",
            context=team_statements_context, order=40),
    Section(page="profile", slot="main", template="reports/_profile_channels.html",
            context=profile_channels_context),
]

DEMO_SEEDS = [demo_statements_seed]

ATTENTION = [statements_attention]

RESERVATION_REQUESTED = [reservation_budget_check]

TEAM_EVENT = [channels_team_event]

ADMIN_EVENT = [admin_channels_event]

USER_EVENT = [user_channels_event]
