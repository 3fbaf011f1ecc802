"""Reclaim: the periodic evaluation that keeps recommendations in step with what
the GPUs do, and exemptions. The lifecycle of a recommendation (accept, object,
release...) is in `lifecycle.py`. Rules: docs/accounting.md, "Reclaim
recommendations"."""

from datetime import datetime

from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from accounts.models import Team, User
from gpuquota.core.errors import Conflict, DomainError
from gpuquota.core.fields import whole_second
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import GpuClass
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import require_admin_actor
from reclaim.conf import Policy
from reclaim.conf import policy as policy_in_force
from reclaim.evaluation import Finding, ReservationFindings, findings_evaluate
from reclaim.models import Exemption, Recommendation, RecommendationGpu

R = Recommendation.Status
R_LIVE = [R.OPEN, R.ACCEPTED, R.OBJECTED]
MAX_REASON = 2000


def reservations_to_evaluate(*, now: datetime, policy: Policy) -> list[Reservation]:
    """Active reservations still holding GPUs whose charged window began at least the
    policy's shortest look-back ago."""
    since = now - policy.shortest
    return list(
        Reservation.objects.filter(status=Reservation.Status.ACTIVE, start__lte=since)
        .filter(Q(approved_at__isnull=True) | Q(approved_at__lte=since))
        .annotate(held_until=Max("assignments__assigned_until")).filter(held_until__gt=now)
        .select_related("team", "gpu_class").order_by("id")
    )


def _exemptions_q(*, now: datetime) -> Q:
    return Q(created_at__lte=now, until__gt=now)


def exemption_for(*, reservation: Reservation, now: datetime) -> Exemption | None:
    """The exemption in force for a reservation at `now`, if any."""
    return Exemption.objects.filter(
        Q(reservation=reservation)
        | Q(team_id=reservation.team_id, gpu_class_id=reservation.gpu_class_id),
        _exemptions_q(now=now),
    ).order_by("-until").first()


def _exemptions_for(*, reservations: list[Reservation], now: datetime
                    ) -> dict[int, Exemption]:
    """`exemption_for` of many reservations, in one query."""
    rows = list(Exemption.objects.filter(_exemptions_q(now=now)).filter(
        Q(reservation_id__in=[r.id for r in reservations])
        | Q(team_id__in={r.team_id for r in reservations})).order_by("-until"))
    found = {}
    for r in reservations:
        found[r.id] = next((e for e in rows if e.reservation_id == r.id or (
            e.team_id == r.team_id and e.gpu_class_id == r.gpu_class_id)), None)
    return found


def _snoozed(*, reservation: Reservation, kind: str, now: datetime) -> bool:
    return Recommendation.objects.filter(
        reservation=reservation, kind=kind, status=R.DISMISSED, snoozed_until__gt=now
    ).exists()


def _set_gpus(rec: Recommendation, gpu_ids: list[int], have: set[int] | None = None) -> None:
    if have is None:
        have = set(rec.gpu_rows.values_list("gpu_id", flat=True))
    if have - set(gpu_ids):
        rec.gpu_rows.exclude(gpu_id__in=gpu_ids).delete()
    RecommendationGpu.objects.bulk_create(
        [RecommendationGpu(recommendation=rec, gpu_id=g) for g in gpu_ids if g not in have])


def _apply(*, rec: Recommendation, finding: Finding, window, exemption, now) -> None:
    rec.evidence = finding.evidence
    rec.target_count = finding.target_count
    rec.savings = finding.savings.amount if finding.savings else None
    rec.currency = finding.savings.currency if finding.savings else ""
    rec.window_start, rec.window_end = window.start, window.end
    rec.over_quota = rec.reservation.over_quota
    rec.exemption = exemption
    rec.evaluated_at = rec.updated_at = now


def _close(rec: Recommendation, *, note: str, now: datetime) -> None:
    before, rec.status = rec.status, R.CLOSED
    rec.closed_at, rec.closed_note, rec.updated_at = now, note, now
    rec.save(update_fields=["status", "closed_at", "closed_note", "updated_at"])
    audit_record(actor=None, action="reclaim.close", obj=rec, team=rec.reservation.team,
                 changes={"status": [before, R.CLOSED]}, reason=note)


@transaction.atomic
def reservation_evaluate(*, found: ReservationFindings, exemption: Exemption | None,
                         now: datetime) -> dict[str, int]:
    """Bring one reservation's recommendations in step with its findings: create the
    new, refresh the open, close the open ones that no longer hold; never a duplicate
    (the reservation's row lock and a partial unique constraint); a dismissed one
    stays quiet while snoozed; accepted and objected ones are left to their course."""
    reservation = Reservation.objects.select_for_update().select_related(
        "team", "gpu_class").get(pk=found.reservation.pk)
    live = {r.kind: r for r in reservation.recommendations.filter(status__in=R_LIVE)
            .prefetch_related("gpu_rows")}
    counts = {"created": 0, "updated": 0, "closed": 0}
    for finding in found.findings:
        rec = live.pop(finding.kind, None)
        if rec is None:
            if _snoozed(reservation=reservation, kind=finding.kind, now=now):
                continue
            rec = Recommendation(reservation=reservation, kind=finding.kind, created_at=now)
            _apply(rec=rec, finding=finding, window=found.window, exemption=exemption, now=now)
            rec.save()
            _set_gpus(rec, finding.gpu_ids, have=set())
            audit_record(actor=None, action="reclaim.recommend", obj=rec, team=reservation.team,
                         changes={"kind": rec.kind, "gpus": finding.gpu_ids,
                                  "target_count": rec.target_count,
                                  "savings": str(rec.savings), "exempt": bool(exemption)})
            counts["created"] += 1
        elif rec.status == R.OPEN:
            rec.reservation = reservation
            _apply(rec=rec, finding=finding, window=found.window, exemption=exemption, now=now)
            rec.save()
            _set_gpus(rec, finding.gpu_ids, have={g.gpu_id for g in rec.gpu_rows.all()})
            counts["updated"] += 1
    for rec in live.values():
        if rec.status == R.OPEN:
            rec.reservation = reservation
            _close(rec, note=f"No longer holds at the evaluation of {now:%Y-%m-%d %H:%M}Z "
                   "(the GPUs were used, or the reservation changed).", now=now)
            counts["closed"] += 1
    return counts


def recommendations_evaluate(*, now: datetime | None = None, policy: Policy | None = None
                             ) -> dict[str, int]:
    """Evaluate every eligible reservation (the reads set-based, in a fixed number of
    queries; one transaction per reservation with something to write) and close the
    open recommendations of reservations that stopped holding GPUs. Safe to run any
    number of times: the same inputs give the same recommendations."""
    now = whole_second(now or timezone.now())
    policy = policy or policy_in_force()
    totals = {"reservations": 0, "created": 0, "updated": 0, "closed": 0}
    eligible = reservations_to_evaluate(now=now, policy=policy)
    found = findings_evaluate(reservations=eligible, now=now, policy=policy)
    exemptions = _exemptions_for(reservations=eligible, now=now)
    with_live = set(Recommendation.objects.filter(
        status__in=R_LIVE, reservation_id__in=[r.id for r in eligible]
    ).values_list("reservation_id", flat=True))
    for reservation in eligible:
        totals["reservations"] += 1
        if not found[reservation.id].findings and reservation.id not in with_live:
            continue
        for key, value in reservation_evaluate(
                found=found[reservation.id], exemption=exemptions[reservation.id],
                now=now).items():
            totals[key] += value
    with transaction.atomic():
        for rec in Recommendation.objects.select_for_update().filter(status=R.OPEN).exclude(
                reservation_id__in=[r.id for r in eligible]).select_related("reservation__team"):
            _close(rec, note="The reservation no longer holds GPUs to evaluate.", now=now)
            totals["closed"] += 1
    return totals


def _clean_reason(reason: str, *, field: str = "reason") -> str:
    reason = (reason or "").strip()
    if not reason:
        raise DomainError("Give a reason.", field=field)
    if len(reason) > MAX_REASON:
        raise DomainError(f"At most {MAX_REASON} characters.", field=field)
    return reason


@transaction.atomic
def exemption_create(*, actor: User, reason: str, until: datetime,
                     reservation: Reservation | None = None, team: Team | None = None,
                     gpu_class: GpuClass | None = None, now: datetime | None = None
                     ) -> Exemption:
    """An admin marks a reservation, or a team's reservations of a class, as not to
    be reclaimed until `until`."""
    now = whole_second(now or timezone.now())
    require_admin_actor(actor=actor)
    reason = _clean_reason(reason)
    if until is None or until.tzinfo is None:
        raise DomainError("Give an end with a time zone.", field="until")
    until = whole_second(until)
    if until <= now:
        raise DomainError("The end must be in the future.", field="until")
    if reservation is not None and (team is not None or gpu_class is not None):
        raise DomainError("Exempt a reservation, or a team and class, not both.",
                          field="reservation")
    if reservation is None and (team is None or gpu_class is None):
        raise DomainError("Name a reservation, or both a team and a GPU class.", field="team")
    exemption = Exemption.objects.create(
        reservation=reservation, team=team, gpu_class=gpu_class, reason=reason, until=until,
        created_by=actor, created_at=now)
    audit_record(actor=actor, action="reclaim.exempt", obj=exemption,
                 team=reservation.team if reservation else team,
                 changes={"reservation": reservation.pk if reservation else None,
                          "team": team.slug if team else None,
                          "gpu_class": gpu_class.name if gpu_class else None,
                          "until": until.isoformat()}, reason=reason)
    return exemption


@transaction.atomic
def exemption_update(*, exemption: Exemption, actor: User, reason: str | None = None,
                     until: datetime | None = None, now: datetime | None = None) -> Exemption:
    """Change an exemption's reason or end (an end in the past is refused: end it)."""
    now = whole_second(now or timezone.now())
    require_admin_actor(actor=actor)
    exemption = Exemption.objects.select_for_update().get(pk=exemption.pk)
    changes = {}
    if reason is not None:
        changes["reason"] = [exemption.reason, _clean_reason(reason)]
        exemption.reason = changes["reason"][1]
    if until is not None:
        if until.tzinfo is None:
            raise DomainError("Give an end with a time zone.", field="until")
        if whole_second(until) <= now:
            raise DomainError("The end must be in the future.", field="until")
        changes["until"] = [exemption.until.isoformat(), whole_second(until).isoformat()]
        exemption.until = whole_second(until)
    exemption.save()
    audit_record(actor=actor, action="reclaim.exemption_update", obj=exemption,
                 team=exemption.reservation.team if exemption.reservation else exemption.team,
                 changes=changes)
    return exemption


@transaction.atomic
def exemption_end(*, exemption: Exemption, actor: User, now: datetime | None = None
                  ) -> Exemption:
    """End an exemption now (it stays in the history)."""
    now = whole_second(now or timezone.now())
    require_admin_actor(actor=actor)
    exemption = Exemption.objects.select_for_update().get(pk=exemption.pk)
    if exemption.until <= now:
        raise Conflict("This exemption has already ended.")
    before = exemption.until
    exemption.until = now
    exemption.save(update_fields=["until"])
    audit_record(actor=actor, action="reclaim.exemption_end", obj=exemption,
                 team=exemption.reservation.team if exemption.reservation else exemption.team,
                 changes={"until": [before.isoformat(), exemption.until.isoformat()]})
    return exemption
