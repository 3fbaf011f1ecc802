"""Mail to a team's leads about a recommendation: accepted (which GPUs, why, when they
go), released, closed (busy again), withdrawn and upheld over their objection; and to the
admins, a lead's objection. The team's channels hear of each (`reclaim.told`). Sent
outside any transaction by the `reclaim.notify` task after the change commits;
`*_notified_at` records that every lead was served, so the release sweep resends only what
an outage left unsent (the mail module never mails one lead twice under one key, and the
notification outbox never queues one channel twice). The objection's mails (to the admins,
and the upheld decision to the leads) are written with the step itself, through the mail
outbox, like the reservation decisions."""

from datetime import datetime, timedelta

from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from accounts.selectors import platform_admins, team_leads
from gpuquota.core.fields import whole_second
from gpuquota.mail.conf import base_url
from gpuquota.mail.outbox import mail_send_later
from gpuquota.mail.services import mail_send
from reclaim.models import Recommendation
from reclaim.told import recommendation_tell

R = Recommendation.Status
RESEND_WITHIN = timedelta(days=2)
EVENTS = {
    "accepted": ("accept_notified_at", "reclaim_accepted"),
    "released": ("release_notified_at", "reclaim_released"),
    "closed": ("release_notified_at", "reclaim_closed"),
    "withdrawn": ("release_notified_at", "reclaim_withdrawn"),
}


def notice_context(rec: Recommendation) -> dict:
    """What every reclaim mail shows: the reservation, the GPUs with their evidence."""
    per_gpu = rec.evidence.get("gpus", {})
    gpus = []
    for row in rec.gpu_rows.select_related("gpu__node").order_by("gpu__node__hostname",
                                                                  "gpu__index"):
        ev = per_gpu.get(str(row.gpu_id), {})
        gpus.append({"name": f"{row.gpu.node.hostname}/{row.gpu.index}", "uuid": row.gpu.uuid,
                     "state": row.state, "note": row.note,
                     "busy_pct": _pct(ev.get("busy_fraction")),
                     "mean_util": ev.get("mean_util_gpu"),
                     "memory_gib": _gib(ev.get("memory_used_bytes_max")),
                     "last_busy_at": _instant(ev.get("last_busy_at"))})
    reservation = rec.reservation
    return {"rec": rec, "reservation": reservation, "team": reservation.team, "gpus": gpus,
            "kind": rec.get_kind_display(), "target_count": rec.target_count,
            "window_start": rec.window_start, "window_end": rec.window_end,
            "grace_until": rec.grace_until, "released_at": rec.released_at,
            "savings": rec.savings, "currency": rec.currency, "note": rec.closed_note,
            "reason": rec.objection_decision_reason or rec.dismissed_reason}


def _instant(value: str | None) -> datetime | None:
    """An instant the evidence keeps as ISO text, for the mail to write as the pages do."""
    return datetime.fromisoformat(value) if value else None


def _pct(value: str | None) -> str:
    return "no data" if value is None else f"{float(value) * 100:.1f}%"


def _gib(value: int | None) -> str:
    return "none" if not value else f"{value / 2**30:.1f} GiB"


def recommendation_notify(*, recommendation_id: int, event: str) -> bool:
    """Mail the team's leads about `event`; True once every lead has been served."""
    field, template = EVENTS[event]
    rec = Recommendation.objects.select_related("reservation__team", "reservation__gpu_class"
                                                ).get(pk=recommendation_id)
    if getattr(rec, field) is not None:
        return True
    key = f"reclaim-{rec.pk}-{event}"
    recommendation_tell(rec, event=event, key=key)
    outcome = mail_send(template=template, recipients=team_leads(team=rec.reservation.team),
                        context=notice_context(rec), key=key)
    if not outcome.complete:
        return False
    Recommendation.objects.filter(pk=rec.pk, **{f"{field}__isnull": True}).update(
        **{field: whole_second(timezone.now())})
    return True


def notices_pending(*, within: timedelta = RESEND_WITHIN) -> list[tuple[int, str]]:
    """(recommendation id, event) of every notice not yet fully served, for the steps
    of the last `within` (older news is not worth a late mail)."""
    recent = Recommendation.objects.filter(updated_at__gte=timezone.now() - within)
    accepted = recent.filter(
        accepted_at__isnull=False, released_by__isnull=True, accept_notified_at__isnull=True)
    pending = [(rec_id, "accepted") for rec_id in accepted.values_list("id", flat=True)]
    after = recent.filter(
        Q(status__in=[R.RELEASED, R.CLOSED], accepted_at__isnull=False)
        | Q(status=R.DISMISSED, objection_decision="withdrawn"),
        release_notified_at__isnull=True)
    events = {R.RELEASED: "released", R.CLOSED: "closed", R.DISMISSED: "withdrawn"}
    pending += [(rec_id, events[status]) for rec_id, status in after.values_list("id", "status")]
    return sorted(pending)


def _objection_context(rec: Recommendation) -> dict:
    """What the objection mails show (JSON-safe: the outbox stores it with the change)."""
    reservation = rec.reservation
    gpus = [f"{row.gpu.node.hostname}/{row.gpu.index}" for row in
            rec.gpu_rows.select_related("gpu__node").order_by("gpu__node__hostname",
                                                               "gpu__index")]

    def name(user) -> str:
        return (user.get_full_name() or user.username) if user else ""

    return {"objection": {
        "recommendation": rec.pk, "kind": rec.get_kind_display(), "reservation": reservation.pk,
        "team": reservation.team.name, "gpu_class": reservation.gpu_class.name,
        "count": reservation.count, "gpus": gpus, "lead": name(rec.objection_by),
        "reason": rec.objection_reason, "objected_at": rec.objection_at,
        "grace_until": rec.grace_until, "decided_by": name(rec.objection_decided_by),
        "decision_reason": rec.objection_decision_reason,
        "review_url": base_url() + reverse("reclaim_review") + "#objected",
        "detail_url": base_url() + reverse("reclaim_detail", args=[rec.pk]),
        "team_url": base_url() + reverse("team_detail", args=[reservation.team.slug]),
    }}


def objection_notify(*, recommendation: Recommendation) -> None:
    """In the objection's transaction: every admin is told that a lead objects, with the
    reason, and that nothing is released until one of them decides (the outbox sends it
    after commit, once per admin)."""
    key = f"reclaim-{recommendation.pk}-objected"
    mail_send_later(template="reclaim_objected", recipients=platform_admins(),
                    context=_objection_context(recommendation), key=key)
    recommendation_tell(recommendation, event="objected", key=key, admins=True)


def objection_upheld_notify(*, recommendation: Recommendation) -> None:
    """In the decision's transaction: the team's leads are told their objection was
    overruled, why, and when the GPUs go."""
    key = f"reclaim-{recommendation.pk}-upheld"
    mail_send_later(template="reclaim_upheld",
                    recipients=team_leads(team=recommendation.reservation.team),
                    context=_objection_context(recommendation), key=key)
    recommendation_tell(recommendation, event="upheld", key=key)
