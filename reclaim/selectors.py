"""Reads of reclaim: recommendation lists for the review page, the team banner and
the API; the fleet figures (reclaimable now, reclaimed this month)."""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import F, QuerySet
from django.utils import timezone

from accounts.models import Team, User
from accounts.selectors import teams_visible
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Assignment
from reclaim.models import Recommendation, RecommendationGpu
from reclaim.savings import spans_amount

R = Recommendation.Status
ACTIONABLE = [Recommendation.Kind.RECLAIM, Recommendation.Kind.RIGHT_SIZE]
ORDER = ("-over_quota", F("savings").desc(nulls_last=True), "id")


def recommendations_list(*, statuses: Iterable[str] | None = None, team: Team | None = None,
                         user: User | None = None, kind: str | None = None
                         ) -> QuerySet[Recommendation]:
    """Recommendations, over-quota reservations first, then by savings (largest first);
    restricted to what `user` may read when given."""
    qs = Recommendation.objects.select_related(
        "reservation__team", "reservation__gpu_class", "exemption").prefetch_related(
        "gpu_rows__gpu__node")
    if statuses is not None:
        qs = qs.filter(status__in=list(statuses))
    if team is not None:
        qs = qs.filter(reservation__team=team)
    if kind is not None:
        qs = qs.filter(kind=kind)
    if user is not None:
        qs = qs.filter(reservation__team__in=teams_visible(user=user))
    return qs.order_by(*ORDER)


def team_banner_recommendations(*, team: Team) -> list[Recommendation]:
    """What a team's page announces: accepted (GPUs going at the end of the grace),
    objected (waiting for an admin) and open reclaim recommendations (self-release)."""
    return list(recommendations_list(statuses=[R.ACCEPTED, R.OBJECTED, R.OPEN], team=team)
                .exclude(kind=Recommendation.Kind.COVERAGE_WARNING))


@dataclass(frozen=True)
class ReclaimFigures:
    reclaimable_gpus: int
    reclaimable_gpu_hours: Decimal
    reclaimable_savings: Decimal
    reclaimed_gpu_hours: Decimal
    saved: Decimal
    currency: str


def _s(value: datetime) -> int:
    return int(value.timestamp())


def reclaim_figures(*, now: datetime | None = None) -> ReclaimFigures:
    """Reclaimable now: the GPUs of open, non-exempt reclaim and right-size
    recommendations, their remaining assigned GPU-hours and savings. Reclaimed this
    month: GPU-hours from each release made this month (UTC) to its reservation's end,
    and what they would have cost at the reserved rates. A fixed number of queries
    per GPU class."""
    now = now or timezone.now()
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    live = Assignment.objects.filter(
        reservation__recommendations__status=R.OPEN,
        reservation__recommendations__exemption__isnull=True,
        reservation__recommendations__kind__in=ACTIONABLE,
        reservation__recommendations__gpu_rows__gpu_id=F("gpu_id"),
        assigned_until__gt=now,
    ).values("gpu_id", "assigned_from", "assigned_until", "reservation__gpu_class_id")
    spans: dict[int, dict[int, tuple[int, int]]] = {}
    for row in live:
        start = max(_s(now), _s(row["assigned_from"]))
        spans.setdefault(row["reservation__gpu_class_id"], {})[row["gpu_id"]] = (
            start, _s(row["assigned_until"]))
    reclaimable = [spans_amount(gpu_class_id=c, spans=list(by_gpu.values()))
                   for c, by_gpu in spans.items()]
    released: dict[int, list[tuple[int, int]]] = {}
    for row in RecommendationGpu.objects.filter(
        state=RecommendationGpu.State.RELEASED, released_at__gte=month_start,
        released_at__lt=now, note="",
    ).values("released_at", "recommendation__reservation__end",
             "recommendation__reservation__gpu_class_id"):
        a, b = _s(row["released_at"]), _s(row["recommendation__reservation__end"])
        if a < b:
            released.setdefault(row["recommendation__reservation__gpu_class_id"], []).append(
                (a, b))
    saved = [spans_amount(gpu_class_id=c, spans=s) for c, s in released.items()]
    # Nothing to reclaim or saved is still an amount: 0.00 in the currency of the rates.
    currency = next((x.currency for x in reclaimable + saved if x.currency), "") or (
        RateCard.objects.filter(valid_from__lte=now).exclude(valid_until__lte=now)
        .order_by("valid_from").values_list("currency", flat=True).last() or "")
    return ReclaimFigures(
        reclaimable_gpus=sum(len(v) for v in spans.values()),
        reclaimable_gpu_hours=Decimal(sum(x.seconds for x in reclaimable)) / 3600,
        reclaimable_savings=sum((x.amount or Decimal(0) for x in reclaimable), Decimal("0.00")),
        reclaimed_gpu_hours=Decimal(sum(x.seconds for x in saved)) / 3600,
        saved=sum((x.amount or Decimal(0) for x in saved), Decimal("0.00")),
        currency=currency,
    )
