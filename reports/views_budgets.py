"""The team page's budget and channels: set the month's budget, add, test and remove a
channel (a team's leads and admins; members read; anyone else 404). Views parse, ask
accounts.permissions, call one service, redirect."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts.permissions import team_for_action
from gpuquota.core.errors import DomainError
from reports.budgets import budget_set
from reports.channels import channel_add, channel_events_set, channel_remove, channel_test
from reports.hour_budgets import class_hours_budget_set
from reports.models import TeamChannel
from reports.views_channel_told import events_set_told, removed_told, test_told


def _back(slug: str):
    return redirect(f"/teams/{slug}/#budget")


@login_required
@require_POST
def team_budget_set(request, slug: str):
    team = team_for_action(request.user, slug)
    try:
        budget = budget_set(team=team, amount=request.POST.get("amount", ""), by=request.user,
                            thresholds=request.POST.get("thresholds") or None,
                            currency=request.POST.get("currency") or None,
                            action=request.POST.get("action") or None)
    except DomainError as exc:
        messages.error(request, f"Budget not set ({exc.field or 'budget'}): {exc.message}")
    else:
        action = budget.get_action_display().lower()
        messages.success(request, f"Budget from {budget.valid_from:%Y-%m}: {budget.amount} "
                                  f"{budget.currency}; at 100 %: {action}.")
    return _back(slug)


@login_required
@require_POST
def team_class_hours_budget_set(request, slug: str):
    team = team_for_action(request.user, slug)
    try:
        budget = class_hours_budget_set(
            team=team, gpu_class=request.POST.get("gpu_class", ""),
            hours=request.POST.get("hours", ""), by=request.user,
            thresholds=request.POST.get("thresholds") or None,
            action=request.POST.get("action") or None)
    except DomainError as exc:
        messages.error(request, f"GPU-hour budget not set ({exc.field or 'budget'}): "
                                f"{exc.message}")
    else:
        messages.success(request, f"{budget.gpu_class.name} budget from "
                                  f"{budget.valid_from:%Y-%m}: {budget.hours} GPU-hours; at "
                                  f"100 %: {budget.get_action_display().lower()}.")
    return _back(slug)


@never_cache  # the page shows the webhook's signing secret
@login_required
@require_POST
def team_channel_add(request, slug: str):
    team = team_for_action(request.user, slug)
    try:
        channel, secret = channel_add(team=team, kind=request.POST.get("kind", ""),
                                      name=request.POST.get("name", ""),
                                      url=request.POST.get("url", ""), by=request.user,
                                      events=request.POST.getlist("events"))
    except DomainError as exc:
        messages.error(request, f"Channel not added ({exc.field or 'channel'}): {exc.message}")
        return _back(slug)
    # the signing secret is shown once, on this page, never stored in a message or cookie
    return render(request, "reports/channel_added.html",
                  {"team": team, "channel": channel, "secret": secret})


def _channel(request, slug: str, channel_id: int) -> TeamChannel:
    team = team_for_action(request.user, slug)
    channel = TeamChannel.objects.filter(team=team, pk=channel_id, active=True).first()
    if channel is None:
        raise Http404("No such channel.")
    return channel


@login_required
@require_POST
def team_channel_test(request, slug: str, channel_id: int):
    channel = _channel(request, slug, channel_id)
    test_told(request, channel, channel_test(channel=channel, by=request.user))
    return _back(slug)


@login_required
@require_POST
def team_channel_remove(request, slug: str, channel_id: int):
    channel = _channel(request, slug, channel_id)
    channel_remove(channel=channel, by=request.user)
    removed_told(request, channel)
    return _back(slug)


@login_required
@require_POST
def team_channel_events(request, slug: str, channel_id: int):
    channel = _channel(request, slug, channel_id)
    events_set_told(request, channel, channel_events_set)
    return _back(slug)
