"""Mail about reservation decisions, sent through gpuquota.mail after the deciding
transaction commits: admins learn of a request waiting for approval, the requesting lead
of its approval, denial (with the reason) or expiry undecided; the team's channels hear of
each (`team_event`), and the admins' channels of a request to approve (`admin_event`).
Keys are per reservation and event, so each is told once whatever retries happen."""

from dataclasses import replace

from django.urls import reverse

from accounts.selectors import platform_admins
from gpuquota.core.contributions import admin_event, team_event
from gpuquota.mail.conf import base_url
from gpuquota.mail.outbox import mail_send_later
from gpuquota.outbox.render import Message, when_utc
from gpuquota.reservations.models import Reservation

TOLD = {"pending": "waits for approval", "approved": "approved", "denied": "denied",
        "expired": "expired undecided"}


def reservation_mail_context(reservation: Reservation) -> dict:
    """What every reservation mail shows (JSON-safe: it travels to the mail worker)."""
    return {"reservation": {
        "id": reservation.pk,
        "team": reservation.team.name,
        "gpu_class": reservation.gpu_class.name,
        "count": reservation.count,
        "start": reservation.start,
        "end": reservation.end,
        "purpose": reservation.purpose,
        "over_quota": reservation.over_quota,
        "requested_by": reservation.requested_by.get_full_name()
        or reservation.requested_by.username,
        "decision_reason": reservation.decision_reason,
        "decided_by": (reservation.decided_by.get_full_name() or reservation.decided_by.username)
        if reservation.decided_by else "",
        "team_url": base_url() + reverse("team_detail", args=[reservation.team.slug]),
        "pending_url": base_url() + reverse("reservation_pending"),
    }}


def reservation_pending_notify(reservation: Reservation) -> None:
    """After commit: every admin is told that `reservation` waits for approval (by mail and
    on their channels), and so are the team's channels."""
    key = f"reservation:{reservation.pk}:pending"
    mail_send_later(template="reservation_pending", recipients=platform_admins(),
                    context=reservation_mail_context(reservation), key=key)
    message = reservation_message(reservation, event="pending")
    team_event(team_id=reservation.team_id, key=key, message=message)
    admin_event(key=key, message=replace(
        message, link=base_url() + reverse("reservation_pending")))


def reservation_decision_notify(reservation: Reservation, *, decision: str) -> None:
    """After commit: the requesting lead is told of the decision on `reservation`:
    `approved`, `denied` (with the reason) or `expired` (denied, its window passed undecided)."""
    if decision not in ("approved", "denied", "expired"):
        raise ValueError(f"unknown reservation decision {decision!r}")
    key = f"reservation:{reservation.pk}:{decision}"
    mail_send_later(template=f"reservation_{decision}", recipients=[reservation.requested_by],
                    context=reservation_mail_context(reservation), key=key)
    team_event(team_id=reservation.team_id, key=key, message=reservation_message(
        reservation, event=decision))


def reservation_message(reservation: Reservation, *, event: str) -> Message:
    """What a team's channels are told of `event` on `reservation`."""
    facts = [("GPUs", f"{reservation.count} \u00d7 {reservation.gpu_class.name}"),
             ("From", when_utc(reservation.start)),
             ("Until", when_utc(reservation.end)),
             ("Requested by", reservation.requested_by.get_full_name()
              or reservation.requested_by.username)]
    if event in ("denied", "expired") and reservation.decision_reason:
        facts.append(("Reason", reservation.decision_reason))
    return Message(
        event=f"reservation.{event}",
        title=f"{reservation.team.name}: reservation #{reservation.pk} {TOLD[event]}",
        text=(f"{reservation.count} \u00d7 {reservation.gpu_class.name} from "
              f"{when_utc(reservation.start)} until {when_utc(reservation.end)}"
              + (f": {reservation.purpose}" if reservation.purpose else "") + "."),
        facts=facts, link=base_url() + reverse("team_detail", args=[reservation.team.slug]),
        data={"reservation": reservation.pk, "team": reservation.team.slug, "event": event,
              "gpu_class": reservation.gpu_class.name, "count": reservation.count,
              "start": reservation.start.isoformat(), "end": reservation.end.isoformat()})
