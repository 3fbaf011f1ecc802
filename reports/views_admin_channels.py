"""The admins' channels page (`/manage/channels/`): the organisation's Slack, Teams and
signed-webhook channels, what each hears, send test, remove, and their deliveries. Admins
only; 404 for everyone else. Views parse, call one service, render or redirect."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts.permissions import require_admin
from gpuquota.core.errors import DomainError
from gpuquota.outbox.events import ADMIN_EVENTS
from reports.admin_channels import (
    admin_channel_add,
    admin_channel_deliveries,
    admin_channel_events_set,
    admin_channel_remove,
    admin_channel_test,
)
from reports.models import AdminChannel
from reports.views_channel_told import events_set_told, removed_told, test_told


def _back():
    return redirect("manage_channels")


@never_cache  # a webhook's signing secret is shown once, on the answer to the add
@login_required
def manage_channels(request):
    require_admin(request.user)
    if request.method == "POST":
        try:
            channel, secret = admin_channel_add(
                kind=request.POST.get("kind", ""), name=request.POST.get("name", ""),
                url=request.POST.get("url", ""), events=request.POST.getlist("events"),
                by=request.user)
        except DomainError as exc:
            messages.error(request, f"Channel not added ({exc.field or 'channel'}): "
                                    f"{exc.message}")
            return _back()
        return render(request, "reports/channel_added.html",
                      {"channel": channel, "secret": secret, "back": "/manage/channels/"})
    return render(request, "reports/manage_channels.html", {
        "channels": AdminChannel.objects.filter(active=True), "channel_events": ADMIN_EVENTS,
        "deliveries": admin_channel_deliveries()})


def _channel(request, channel_id: int) -> AdminChannel:
    require_admin(request.user)
    return get_object_or_404(AdminChannel, pk=channel_id, active=True)


@login_required
@require_POST
def manage_channel_test(request, channel_id: int):
    channel = _channel(request, channel_id)
    test_told(request, channel, admin_channel_test(channel=channel, by=request.user))
    return _back()


@login_required
@require_POST
def manage_channel_events(request, channel_id: int):
    channel = _channel(request, channel_id)
    events_set_told(request, channel, admin_channel_events_set)
    return _back()


@login_required
@require_POST
def manage_channel_remove(request, channel_id: int):
    channel = _channel(request, channel_id)
    admin_channel_remove(channel=channel, by=request.user)
    removed_told(request, channel)
    return _back()
