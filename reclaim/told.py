"""What reclaim tells a team's channels (`gpuquota.core.contributions.team_event`), with the
mail to its leads: a recommendation accepted (which GPUs go, and when), released, closed
(busy again), withdrawn, objected to by a lead, and upheld over the objection; the
objection to the admins' channels too (`admin_event`)."""

from django.urls import reverse

from gpuquota.core.contributions import admin_event, team_event
from gpuquota.mail.conf import base_url
from gpuquota.outbox.render import Message, when_utc
from reclaim.models import Recommendation

TOLD = {
    "accepted": "GPUs to be reclaimed",
    "released": "GPUs reclaimed",
    "closed": "reclaim closed: the GPUs are busy again",
    "withdrawn": "reclaim withdrawn",
    "objected": "a lead objects to a reclaim",
    "upheld": "reclaim upheld over the objection",
}


def recommendation_tell(rec: Recommendation, *, event: str, key: str,
                        admins: bool = False) -> None:
    """Queue `event` on `rec` to the team's channels under `key` (once per channel), and
    to the admins' channels too where `admins` (an objection waits for their decision)."""
    reservation = rec.reservation
    gpus = [f"{row.gpu.node.hostname}/{row.gpu.index}" for row in
            rec.gpu_rows.select_related("gpu__node").order_by("gpu__node__hostname",
                                                               "gpu__index")]
    facts = [("Reservation", f"#{reservation.pk}: {reservation.count} \u00d7 "
              f"{reservation.gpu_class.name}"), ("GPUs", ", ".join(gpus) or "none")]
    if rec.grace_until and event in ("accepted", "objected", "upheld"):
        facts.append(("Released after", when_utc(rec.grace_until)))
    if rec.released_at and event == "released":
        facts.append(("Released at", when_utc(rec.released_at)))
    reason = rec.objection_reason if event == "objected" else (
        rec.objection_decision_reason or rec.dismissed_reason or rec.closed_note)
    if reason:
        facts.append(("Reason", reason))
    message = Message(
        event=f"reclaim.{event}",
        title=f"{reservation.team.name}: {TOLD[event]}",
        text=(f"{rec.get_kind_display()} on reservation #{reservation.pk} "
              f"({len(gpus)} GPU(s)): {TOLD[event]}."),
        facts=facts, link=base_url() + reverse("reclaim_detail", args=[rec.pk]),
        data={"recommendation": rec.pk, "team": reservation.team.slug,
              "reservation": reservation.pk, "event": event, "kind": rec.kind,
              "gpus": gpus})
    team_event(team_id=reservation.team_id, key=key, message=message)
    if admins:
        admin_event(key=key, message=message)
