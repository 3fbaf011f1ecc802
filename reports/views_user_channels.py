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
    row = user_channel_test(channel=channel, by=request.user)
    if row.status == "sent":
        messages.success(request, f"Test delivered to {channel.name} (HTTP "
                                  f"{row.last_status_code}).")
    else:
        messages.error(request, f"Test to {channel.name} failed: {row.error} It is retried.")
    return _back()


@login_required
@require_POST
def user_channel_events_view(request, channel_id: int):
    channel = _own(request, channel_id)
    try:
        user_channel_events_set(channel=channel, events=request.POST.getlist("events"),
                                by=request.user)
    except DomainError as exc:
        messages.error(request, f"Events not changed: {exc.message}")
    else:
        messages.success(request, f"{channel.name} hears: "
                                  f"{', '.join(channel.events) or 'every event'}.")
    return _back()


@login_required
@require_POST
def user_channel_remove_view(request, channel_id: int):
    channel = _own(request, channel_id)
    user_channel_remove(channel=channel, by=request.user)
    messages.success(request, f"Channel {channel.name} removed.")
    return _back()
