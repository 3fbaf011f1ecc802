"""The life of a recommendation: accept (the leads are told; a grace period runs),
object (a lead, before the grace ends), uphold or withdraw (an admin), dismiss
(snoozed), the release after the grace, and a lead's one-step self-release.
Every step is audited. Mail goes out after commit (`notify.py`)."""

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import User
from accounts.permissions import can_act_for_team
from gpuquota.core.dispatch import task_enqueue_on_commit
from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.fields import whole_second
from gpuquota.core.services import audit_record
from gpuquota.reservations.assigning import lock_team_class
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.reservations.services import assignments_end, require_admin_actor
from gpuquota.usage.slots import gpu_busy_slots
from reclaim.conf import grace_busy_s, policy
from reclaim.guards import lent_gpu_ids
from reclaim.models import Recommendation, RecommendationGpu
from reclaim.notify import objection_notify, objection_upheld_notify
from reclaim.services import MAX_REASON, exemption_for

R = Recommendation.Status
G = RecommendationGpu.State
MAX_SNOOZE = timedelta(days=366)


def _reason(text: str | None, *, required: bool, field: str = "reason") -> str:
    text = (text or "").strip()
    if required and not text:
        raise DomainError("Give a reason.", field=field)
    if len(text) > MAX_REASON:
        raise DomainError(f"At most {MAX_REASON} characters.", field=field)
    return text


def _locked(recommendation: Recommendation) -> Recommendation:
    return Recommendation.objects.select_for_update().select_related(
        "reservation__team", "reservation__gpu_class").get(pk=recommendation.pk)


def _audit(rec: Recommendation, *, actor, action: str, changes: dict, reason: str = "") -> None:
    audit_record(actor=actor, action=f"reclaim.{action}", obj=rec, team=rec.reservation.team,
                 changes=changes, reason=reason)


def _notify_after_commit(rec: Recommendation, event: str) -> None:
    """Queue the notice once the step commits. With the broker down the step stands and
    the error is logged (robust): `reclaim.release_due` sends notices still unsent."""
    task_enqueue_on_commit("reclaim.notify", recommendation_id=rec.pk, event=event)


def _accept(rec: Recommendation, *, actor: User, now: datetime, grace: timedelta) -> None:
    if rec.status != R.OPEN:
        raise Conflict(f"Only open recommendations can be accepted; #{rec.pk} is {rec.status}.")
    if rec.kind == Recommendation.Kind.COVERAGE_WARNING:
        raise Conflict("A coverage warning is not a recommendation: nothing to accept.")
    if rec.exemption_id:
        raise Conflict(f"Reservation #{rec.reservation_id} is exempt from reclaim "
                       f"({rec.exemption.reason}).")
    if rec.reservation.status != Reservation.Status.ACTIVE:
        raise Conflict(f"The reservation is {rec.reservation.status}: nothing to reclaim.")
    rec.status, rec.accepted_by, rec.accepted_at = R.ACCEPTED, actor, now
    rec.grace_until, rec.updated_at = now + grace, now
    rec.save(update_fields=["status", "accepted_by", "accepted_at", "grace_until", "updated_at"])
    _audit(rec, actor=actor, action="accept",
           changes={"status": [R.OPEN, R.ACCEPTED], "grace_until": rec.grace_until.isoformat(),
                    "gpus": list(rec.gpu_rows.values_list("gpu__uuid", flat=True))})
    _notify_after_commit(rec, "accepted")


@transaction.atomic
def recommendation_accept(*, recommendation: Recommendation, actor: User,
                          now: datetime | None = None) -> Recommendation:
    """An admin accepts: the team's leads are told, and the GPUs are released when the
    grace period ends unless a lead objects."""
    now = whole_second(now or timezone.now())
    require_admin_actor(actor=actor)
    rec = _locked(recommendation)
    _accept(rec, actor=actor, now=now, grace=policy().grace)
    return rec


def recommendations_accept_bulk(*, ids: list[int], actor: User, now: datetime | None = None
                                ) -> dict[str, list]:
    """Accept each listed recommendation on its own; the refused ones say why."""
    now = whole_second(now or timezone.now())
    require_admin_actor(actor=actor)
    if not ids:
        raise DomainError("Name at least one recommendation.", field="ids")
    result: dict[str, list] = {"accepted": [], "refused": []}
    found = set(Recommendation.objects.filter(id__in=ids).values_list("id", flat=True))
    for rec_id in dict.fromkeys(ids):
        if rec_id not in found:
            result["refused"].append({"id": rec_id, "detail": "No such recommendation."})
            continue
        try:
            with transaction.atomic():
                rec = _locked(Recommendation(pk=rec_id))
                _accept(rec, actor=actor, now=now, grace=policy().grace)
            result["accepted"].append(rec_id)
        except Conflict as exc:
            result["refused"].append({"id": rec_id, "detail": exc.message})
    return result


@transaction.atomic
def recommendation_dismiss(*, recommendation: Recommendation, actor: User, reason: str,
                           snooze: timedelta | None = None, now: datetime | None = None
                           ) -> Recommendation:
    """An admin dismisses an open recommendation with a reason; the evaluation stays
    quiet about this reservation and kind until the snooze ends."""
    now = whole_second(now or timezone.now())
    require_admin_actor(actor=actor)
    reason = _reason(reason, required=True)
    snooze = policy().snooze if snooze is None else snooze
    if snooze < timedelta(0) or snooze > MAX_SNOOZE:
        raise DomainError("Snooze for between 0 seconds and 366 days.", field="snooze_s")
    rec = _locked(recommendation)
    if rec.status != R.OPEN:
        raise Conflict(f"Only open recommendations can be dismissed; #{rec.pk} is {rec.status}.")
    rec.status, rec.dismissed_by, rec.dismissed_at = R.DISMISSED, actor, now
    rec.dismissed_reason, rec.snoozed_until, rec.updated_at = reason, now + snooze, now
    rec.save()
    _audit(rec, actor=actor, action="dismiss", reason=reason,
           changes={"status": [R.OPEN, R.DISMISSED],
                    "snoozed_until": rec.snoozed_until.isoformat()})
    return rec


@transaction.atomic
def recommendation_object(*, recommendation: Recommendation, actor: User, reason: str,
                          now: datetime | None = None) -> Recommendation:
    """A lead of the team objects before the grace period ends: nothing is released
    until an admin upholds the recommendation. One objection per recommendation: once
    an admin has upheld it, only an admin can stop it (withdraw)."""
    now = whole_second(now or timezone.now())
    rec = _locked(recommendation)
    if not can_act_for_team(actor, rec.reservation.team):
        raise PermissionDenied("Only the team's leads can object.")
    reason = _reason(reason, required=True)
    if rec.status != R.ACCEPTED:
        raise Conflict(f"Only an accepted recommendation can be objected to; #{rec.pk} is "
                       f"{rec.status}.")
    if now >= rec.grace_until:
        raise Conflict("The grace period has ended: the GPUs are being released.")
    if rec.objection_decision == Recommendation.ObjectionDecision.UPHELD:
        raise Conflict("An admin has already upheld this recommendation over an objection: "
                       "one objection per recommendation; ask an admin to withdraw it.")
    rec.status, rec.objection_by, rec.objection_at = R.OBJECTED, actor, now
    rec.objection_reason, rec.updated_at = reason, now
    rec.save()
    _audit(rec, actor=actor, action="object", reason=reason,
           changes={"status": [R.ACCEPTED, R.OBJECTED]})
    objection_notify(recommendation=rec)  # the admins, after commit
    return rec


def _decide(rec: Recommendation, *, actor: User, decision: str, reason: str, now) -> None:
    rec.objection_decision, rec.objection_decided_by = decision, actor
    rec.objection_decided_at, rec.objection_decision_reason, rec.updated_at = now, reason, now


@transaction.atomic
def recommendation_uphold(*, recommendation: Recommendation, actor: User, reason: str = "",
                          now: datetime | None = None) -> Recommendation:
    """An admin overrules an objection: the release goes ahead at the end of the grace
    period, or at once if it has passed."""
    now = whole_second(now or timezone.now())
    require_admin_actor(actor=actor)
    reason = _reason(reason, required=False)
    rec = _locked(recommendation)
    if rec.status != R.OBJECTED:
        raise Conflict(f"Only an objected recommendation can be upheld; #{rec.pk} is "
                       f"{rec.status}.")
    _decide(rec, actor=actor, decision=Recommendation.ObjectionDecision.UPHELD, reason=reason,
            now=now)
    rec.status, rec.grace_until = R.ACCEPTED, max(rec.grace_until, now)
    rec.save()
    _audit(rec, actor=actor, action="uphold", reason=reason,
           changes={"status": [R.OBJECTED, R.ACCEPTED],
                    "grace_until": rec.grace_until.isoformat()})
    objection_upheld_notify(recommendation=rec)  # the team's leads, after commit
    return rec


@transaction.atomic
def recommendation_withdraw(*, recommendation: Recommendation, actor: User, reason: str = "",
                            now: datetime | None = None) -> Recommendation:
    """An admin agrees with the objection: the GPUs stay, and the recommendation is
    dismissed (snoozed like any dismissal)."""
    now = whole_second(now or timezone.now())
    require_admin_actor(actor=actor)
    reason = _reason(reason, required=False)
    rec = _locked(recommendation)
    if rec.status != R.OBJECTED:
        raise Conflict(f"Only an objected recommendation can be withdrawn; #{rec.pk} is "
                       f"{rec.status}.")
    _decide(rec, actor=actor, decision=Recommendation.ObjectionDecision.WITHDRAWN,
            reason=reason, now=now)
    rec.status, rec.dismissed_by, rec.dismissed_at = R.DISMISSED, actor, now
    rec.dismissed_reason = reason or f"Withdrawn after the objection: {rec.objection_reason}"
    rec.snoozed_until = now + policy().snooze
    rec.save()
    _audit(rec, actor=actor, action="withdraw", reason=rec.dismissed_reason,
           changes={"status": [R.OBJECTED, R.DISMISSED]})
    _notify_after_commit(rec, "withdrawn")
    return rec


def _busy_again(rec: Recommendation, gpu_ids: list[int], now: datetime) -> set[int]:
    """GPUs busy during the grace period (from acceptance to now) for at least
    `grace_busy_s` in slots of at least 30 busy seconds: in use again."""
    if now <= rec.accepted_at:
        return set()
    slots = gpu_busy_slots(gpu_ids=gpu_ids, start=rec.accepted_at, end=now,
                           assignment_filter=Q(reservation_id=rec.reservation_id))
    threshold = grace_busy_s()
    return {g for g, s in slots.items()
            if sum(v for v in s.busy_by_slot.values() if v >= 30) >= threshold}


def _kept(rec: Recommendation, gpu_ids: list[int], *, now: datetime, at: datetime
          ) -> dict[int, str]:
    """The GPUs the release keeps, with the note: busy again during the grace, or lent at
    its end (reclaiming would cut the borrowers' work)."""
    kept = {g: "lent at the release: lending puts it to work"
            for g in lent_gpu_ids(gpu_ids=set(gpu_ids), at=at)}
    kept.update({g: "busy again during the grace period" for g in _busy_again(rec, gpu_ids, now)})
    return kept


def _end_gpus(rec: Recommendation, rows: list[RecommendationGpu], *, at: datetime,
              now: datetime, actor: User | None) -> list[dict]:
    """End exactly these GPUs' assignments at `at`; the reservation shrinks, or ends
    when it holds nothing more."""
    reservation = Reservation.objects.select_for_update().get(pk=rec.reservation_id)
    running = {a.gpu_id: a for a in reservation.assignments.filter(
        assigned_until__gt=at, gpu_id__in=[r.gpu_id for r in rows]).select_related("gpu")}
    changed = assignments_end(assignments=list(running.values()), at=at,
                              end_reason=Assignment.EndReason.RECLAIMED, now=now)
    for row in rows:
        row.state, row.released_at = G.RELEASED, at
        row.note = "" if row.gpu_id in running else "already given back"
        row.save(update_fields=["state", "released_at", "note"])
    left = reservation.assignments.filter(assigned_until__gt=at).count()
    before = {"status": reservation.status, "count": reservation.count}
    if left == 0:
        reservation.status = Reservation.Status.ENDED
    else:
        reservation.count = left
    reservation.save(update_fields=["status", "count"])
    audit_record(actor=actor, action="reservation.reclaim", obj=reservation,
                 team=reservation.team, reason=f"reclaim recommendation #{rec.pk}",
                 changes={"status": [before["status"], reservation.status],
                          "count": [before["count"], reservation.count],
                          "assignments": changed})
    return changed


@transaction.atomic
def recommendation_release(*, recommendation: Recommendation, now: datetime | None = None
                           ) -> Recommendation:
    """Release an accepted recommendation whose grace has ended, at the grace's end:
    GPUs used again during the grace, or lent at its end (lending puts them to work), are
    skipped (all of them: it closes with that note). One transaction under the
    recommendation's row lock, so a worker killed half-way releases nothing and the next
    run does it all, and two never both do."""
    now = whole_second(now or timezone.now())
    rec = _locked(recommendation)
    if rec.status != R.ACCEPTED or rec.grace_until > now:
        return rec  # done already, objected, or not due: nothing to do
    lock_team_class(team_id=rec.reservation.team_id, gpu_class_id=rec.reservation.gpu_class_id)
    reservation = Reservation.objects.get(pk=rec.reservation_id)
    exemption = exemption_for(reservation=reservation, now=now)
    if reservation.status != Reservation.Status.ACTIVE or exemption is not None:
        rec.status, rec.closed_at, rec.updated_at = R.CLOSED, now, now
        rec.closed_note = (
            f"Exempted before the release ({exemption.reason}): nothing released."
            if exemption else
            "The reservation ended before the grace period did: nothing to release.")
        rec.save()
        _audit(rec, actor=None, action="close", reason=rec.closed_note,
               changes={"status": [R.ACCEPTED, R.CLOSED]})
        return rec
    rows = list(rec.gpu_rows.filter(state=G.PENDING).select_related("gpu"))
    at = rec.grace_until
    kept = _kept(rec, [r.gpu_id for r in rows], now=now, at=at)
    for row in rows:
        if row.gpu_id in kept:
            row.state, row.note = G.SKIPPED, kept[row.gpu_id]
            row.save(update_fields=["state", "note"])
    to_end = [r for r in rows if r.gpu_id not in kept]
    changed = _end_gpus(rec, to_end, at=at, now=now, actor=None) if to_end else []
    skipped = sorted(r.gpu.uuid for r in rows if r.gpu_id in kept)
    if to_end:
        rec.status, rec.released_at = R.RELEASED, at
        if skipped:
            rec.closed_note = ("Skipped, busy again during the grace period or lent: "
                               + ", ".join(skipped))
        _audit(rec, actor=None, action="release", reason=rec.closed_note,
               changes={"status": [R.ACCEPTED, R.RELEASED], "at": at.isoformat(),
                        "assignments": changed, "skipped": skipped})
        _notify_after_commit(rec, "released")
    else:
        rec.status, rec.closed_at = R.CLOSED, now
        rec.closed_note = ("Not released: the GPUs became busy again during the grace "
                           "period, or were lent (" + ", ".join(skipped) + ").")
        _audit(rec, actor=None, action="close", reason=rec.closed_note,
               changes={"status": [R.ACCEPTED, R.CLOSED], "skipped": skipped})
        _notify_after_commit(rec, "closed")
    rec.updated_at = now
    rec.save()
    return rec


def recommendations_release_due(*, now: datetime | None = None) -> dict[str, int]:
    """Release every accepted recommendation whose grace has ended (each in its own
    transaction). Safe to run any number of times, concurrently too."""
    now = whole_second(now or timezone.now())
    due = list(Recommendation.objects.filter(status=R.ACCEPTED, grace_until__lte=now)
               .order_by("grace_until", "id").values_list("id", flat=True))
    counts = {"released": 0, "closed": 0}
    for rec_id in due:
        rec = recommendation_release(recommendation=Recommendation(pk=rec_id), now=now)
        if rec.status == R.RELEASED:
            counts["released"] += 1
        elif rec.status == R.CLOSED:
            counts["closed"] += 1
    return counts


@transaction.atomic
def reservation_release_idle(*, reservation: Reservation, actor: User,
                             now: datetime | None = None) -> Recommendation:
    """A lead gives back, in one step and at once, the idle GPUs the open reclaim
    recommendation of their reservation names."""
    now = whole_second(now or timezone.now())
    if not can_act_for_team(actor, reservation.team):
        raise PermissionDenied("Only the team's leads and admins can do this.")
    rec = Recommendation.objects.filter(
        reservation=reservation, kind=Recommendation.Kind.RECLAIM,
        status__in=[R.OPEN, R.ACCEPTED, R.OBJECTED]).first()
    if rec is None:
        raise Conflict("No idle GPUs are recommended for release on this reservation.")
    rec = _locked(rec)
    lock_team_class(team_id=reservation.team_id, gpu_class_id=reservation.gpu_class_id)
    before = rec.status
    rows = list(rec.gpu_rows.filter(state=G.PENDING).select_related("gpu"))
    changed = _end_gpus(rec, rows, at=now, now=now, actor=actor)
    if rec.accepted_at is None:
        rec.accepted_by, rec.accepted_at = actor, now
    rec.grace_until = min(rec.grace_until or now, now)
    rec.status, rec.released_at, rec.released_by, rec.updated_at = R.RELEASED, now, actor, now
    rec.save()
    _audit(rec, actor=actor, action="self_release",
           changes={"status": [before, R.RELEASED], "assignments": changed})
    _notify_after_commit(rec, "released")
    return rec
