"""A user's own channels, on their profile page: add, choose events, send test, remove.
Each user sees and changes only their own (another's channel is a 404). Views parse, call
one service, render or redirect."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from gpuquota.core.errors import DomainError
from reports.models import UserChannel
from reports.user_channels import (
    user_channel_add,
    user_channel_events_set,
    user_channel_remove,
    user_channel_test,
)
from reports.views_channel_told import events_set_told, removed_told, test_told


def _back():
    return redirect("/accounts/profile/#my-channels")


@never_cache  # a webhook's signing secret is shown once, on the answer
@login_required
@require_POST
def user_channel_add_view(request):
    try:
        channel, secret = user_channel_add(
            user=request.user, kind=request.POST.get("kind", ""),
            name=request.POST.get("name", ""), url=request.POST.get("url", ""),
            events=request.POST.getlist("events"))
    except DomainError as exc:
        messages.error(request, f"Channel not added ({exc.field or 'channel'}): {exc.message}")
        return _back()
    return render(request, "reports/channel_added.html",
                  {"channel": channel, "secret": secret, "back": "/accounts/profile/",
                   "back_label": "Back to my profile", "owner": "your channels"})


def _own(request, channel_id: int) -> UserChannel:
    return get_object_or_404(UserChannel, pk=channel_id, user=request.user, active=True)


@login_required
@require_POST
def user_channel_test_view(request, channel_id: int):
    channel = _own(request, channel_id)
    test_told(request, channel, user_channel_test(channel=channel, by=request.user))
    return _back()


@login_required
@require_POST
def user_channel_events_view(request, channel_id: int):
    channel = _own(request, channel_id)
    events_set_told(request, channel, user_channel_events_set)
    return _back()


@login_required
@require_POST
def user_channel_remove_view(request, channel_id: int):
    channel = _own(request, channel_id)
    user_channel_remove(channel=channel, by=request.user)
    removed_told(request, channel)
    return _back()
