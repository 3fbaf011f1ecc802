"""What the channel pages tell the person who pressed a button (team, admins' and users'
channels alike): a test's delivery, a new choice of events, a removal."""

from django.contrib import messages

from gpuquota.core.errors import DomainError


def test_told(request, channel, row) -> None:
    """The Send test button's answer: delivered (with the HTTP status) or failed."""
    if row.status == "sent":
        messages.success(request, f"Test delivered to {channel.name} (HTTP "
                                  f"{row.last_status_code}).")
    else:
        messages.error(request, f"Test to {channel.name} failed: {row.error} It is retried.")


def events_set_told(request, channel, events_set) -> None:
    """Set the channel's events from the form through `events_set(channel=, events=, by=)`
    and say what it hears now, or why nothing changed."""
    try:
        events_set(channel=channel, events=request.POST.getlist("events"), by=request.user)
    except DomainError as exc:
        messages.error(request, f"Events not changed: {exc.message}")
    else:
        messages.success(request, f"{channel.name} hears: "
                                  f"{', '.join(channel.events) or 'every event'}.")


def removed_told(request, channel) -> None:
    messages.success(request, f"Channel {channel.name} removed.")
