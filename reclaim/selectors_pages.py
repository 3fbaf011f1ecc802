"""Reads for the reclaim pages: the admin review page, the team page's banner and the
audit trail of each recommendation. Each runs a fixed number of queries whatever the
number of recommendations, GPUs or hours."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db.models import Prefetch, Q, QuerySet, Sum
from django.utils.dateparse import parse_datetime
from django.utils.safestring import SafeString

from accounts.models import Team
from gpuquota.core.errors import DomainError
from gpuquota.core.models import AuditEntry
from gpuquota.core.timeutil import Period, hour_floor
from gpuquota.ingest.partitions import raw_data_horizon
from gpuquota.inventory.models import Gpu
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.selectors import reservations_gpu_usage
from reclaim.charts import GpuRow, Piece, svg_utilization_strips
from reclaim.models import Exemption, Recommendation, RecommendationGpu

R = Recommendation.Status
K = Recommendation.Kind
HOUR = timedelta(hours=1)
RECENT_LIMIT = 20
AUDIT_TYPE = Recommendation._meta.label_lower


@dataclass
class GpuEvidence:
    """What the agents saw on one GPU of the reservation over the window."""

    gpu: Gpu
    recommended: bool
    state: str
    coverage: Fraction | None
    busy_fraction: Fraction | None
    mean_util_gpu: Decimal | None
    memory_used_bytes_max: int | None
    process_count: int
    users_seen: list[str]
    last_busy_at: datetime | None
    release_state: str = ""
    release_note: str = ""
    guard: str = ""  # under the guarded rule, what kept a GPU found idle
    reason: str = ""  # ... and why, in words ("not enough history: 3 of 7 days")

    @property
    def label(self) -> str:
        return f"{self.gpu.node.hostname}/{self.gpu.index}"


@dataclass
class RecommendationView:
    rec: Recommendation
    gpus: list[GpuEvidence]
    audit: list[AuditEntry] = field(default_factory=list)
    chart: SafeString | None = None

    @property
    def recommended(self) -> list[GpuEvidence]:
        return [g for g in self.gpus if g.recommended]


def _fraction(value: str | None) -> Fraction | None:
    return None if value is None else Fraction(value)


def _recommendations(qs: QuerySet) -> list[Recommendation]:
    return list(qs.select_related(
        "reservation__team", "reservation__gpu_class", "exemption", "accepted_by",
        "objection_by", "objection_decided_by", "dismissed_by", "released_by",
    ).prefetch_related(Prefetch("gpu_rows", queryset=RecommendationGpu.objects.order_by("gpu_id"))))


def _views(recs: list[Recommendation], *, charts: bool) -> list[RecommendationView]:
    """Evidence rows (one query for the GPUs), audit (one query) and, if asked, the
    utilization strips (one query) of these recommendations."""
    gpu_ids = {int(g) for r in recs for g in r.evidence.get("gpus", {})}
    gpu_ids |= {row.gpu_id for r in recs for row in r.gpu_rows.all()}
    gpus = Gpu.objects.select_related("node").in_bulk(gpu_ids) if gpu_ids else {}
    views = []
    for rec in recs:
        rows = {row.gpu_id: row for row in rec.gpu_rows.all()}
        per_gpu = rec.evidence.get("gpus", {})
        evidence = []
        for gpu_id in sorted({int(g) for g in per_gpu} | set(rows)):
            ev = per_gpu.get(str(gpu_id), {})
            row = rows.get(gpu_id)
            last = ev.get("last_busy_at")
            evidence.append(GpuEvidence(
                gpu=gpus[gpu_id], recommended=row is not None, state=ev.get("state", ""),
                coverage=_fraction(ev.get("coverage")),
                busy_fraction=_fraction(ev.get("busy_fraction")),
                mean_util_gpu=None if ev.get("mean_util_gpu") is None
                else Decimal(ev["mean_util_gpu"]),
                memory_used_bytes_max=ev.get("memory_used_bytes_max"),
                process_count=ev.get("process_count", 0), users_seen=ev.get("users_seen", []),
                last_busy_at=parse_datetime(last) if last else None, guard=ev.get("guard", ""),
                reason=ev.get("reason", ""),
                release_state=row.state if row else "", release_note=row.note if row else "",
            ))
        evidence.sort(key=lambda g: (not g.recommended, g.gpu.node.hostname, g.gpu.index or 0))
        views.append(RecommendationView(rec=rec, gpus=evidence))
    _attach_audit(views)
    if charts:
        _attach_charts(views)
    return views


def _attach_audit(views: list[RecommendationView]) -> None:
    by_id = {str(v.rec.pk): v for v in views}
    if not by_id:
        return
    entries = AuditEntry.objects.filter(object_type=AUDIT_TYPE, object_id__in=list(by_id)) \
        .select_related("actor").order_by("at", "id")
    for entry in entries:
        by_id[entry.object_id].audit.append(entry)


def _pieces(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """The window cut at whole UTC hours: a partial first hour, the whole hours, a partial
    last hour."""
    cuts = [start]
    hour = hour_floor(start) + HOUR
    while hour < end:
        cuts.append(hour)
        hour += HOUR
    return list(zip(cuts, [*cuts[1:], end], strict=True))


def _stored_edges(rec: Recommendation) -> dict[tuple[datetime, datetime], dict]:
    """The partial edge hours of the window as the evaluation computed them (evidence
    `edges`): per edge, per GPU id, (covered seconds, utilization × seconds)."""
    return {(parse_datetime(edge["start"]), parse_datetime(edge["end"])): {
        int(gpu_id): (covered, Decimal(weighted))
        for gpu_id, (covered, weighted) in edge["gpus"].items()}
        for edge in rec.evidence.get("edges", [])}


def _attach_charts(views: list[RecommendationView]) -> None:
    """Covered seconds and utilization of each GPU inside its reservation, failed time
    left out, over each piece of each window: whole hours from the hourly rollups (one
    query for all), the partial hours at the edges as the evaluation computed them from
    the samples (its evidence), or from the samples for a recommendation evaluated before
    it kept them (once per distinct edge: recommendations evaluated together share it);
    an edge whose samples have expired is unknown either way."""
    if not views:
        return
    first = min(hour_floor(v.rec.window_start) for v in views)
    last = max(v.rec.window_end for v in views)
    rows = (GpuHourUsage.objects
            .filter(reservation_id__in={v.rec.reservation_id for v in views}, failed=False,
                    kind=GpuHourUsage.Kind.RESERVED, hour__gte=first, hour__lt=last)
            .values("reservation_id", "gpu_id", "hour")
            .annotate(covered=Sum("covered_s"), weighted=Sum("util_weighted")).order_by())
    usage: dict[tuple, tuple[int, Decimal]] = {
        (row["reservation_id"], row["gpu_id"], row["hour"], row["hour"] + HOUR):
        (row["covered"], row["weighted"]) for row in rows}
    edges: dict[tuple[datetime, datetime], set[int]] = defaultdict(set)
    horizon = raw_data_horizon()
    for view in views:
        rid, stored = view.rec.reservation_id, _stored_edges(view.rec)
        for a, b in _pieces(view.rec.window_start, view.rec.window_end):
            if b - a >= HOUR:
                continue
            if (a, b) in stored and a >= horizon:
                usage.update({(rid, gpu_id, a, b): figures
                              for gpu_id, figures in stored[(a, b)].items()})
            else:
                edges[(a, b)].add(rid)
    unknown = set()
    for (a, b), reservation_ids in edges.items():
        try:
            found = reservations_gpu_usage(reservation_ids=sorted(reservation_ids),
                                           period=Period(a, b))
        except DomainError:  # samples expired: this piece cannot be told any more
            unknown.add((a, b))
            continue
        for (rid, gpu_id), gpu_usage in found.by_gpu.items():
            usage[(rid, gpu_id, a, b)] = (gpu_usage.covered_s, gpu_usage.util_weighted)
    for view in views:
        rid = view.rec.reservation_id
        strips = [GpuRow(label=("▸ " if g.recommended else "") + g.label, pieces=[
            Piece(a, b, None) if (a, b) in unknown
            else Piece(a, b, *usage.get((rid, g.gpu.id, a, b), (0, Decimal(0))))
            for a, b in _pieces(view.rec.window_start, view.rec.window_end)])
            for g in view.gpus]
        view.chart = svg_utilization_strips(
            start=view.rec.window_start, end=view.rec.window_end, rows=strips,
            title=f"Reported share and mean utilization per hour of the GPUs of reservation "
                  f"#{rid} over the look-back window; ▸ marks the recommended GPUs")


#: Recommendations of each list of the review page shown with their evidence and chart.
REVIEW_SHOWN = 50


def review_context(*, now: datetime) -> dict:
    """Everything the admin review page shows: open recommendations (over-quota first,
    then by savings), coverage warnings, exempt ones, objections awaiting a decision,
    accepted ones in their grace period, recent outcomes and the exemptions."""
    recent = _recommendations(
        Recommendation.objects.exclude(status__in=Recommendation.LIVE)
        .order_by("-updated_at", "-id")[:RECENT_LIMIT])
    is_open = Recommendation.objects.filter(status=R.OPEN)
    lists = {
        "open": is_open.exclude(kind=K.COVERAGE_WARNING).filter(exemption__isnull=True),
        "warnings": is_open.filter(kind=K.COVERAGE_WARNING),
        "exempt": is_open.exclude(kind=K.COVERAGE_WARNING).filter(exemption__isnull=False),
        "objected": Recommendation.objects.filter(status=R.OBJECTED),
        "accepted": Recommendation.objects.filter(status=R.ACCEPTED)
        .order_by("grace_until", "pk"),
    }
    # Each list's first REVIEW_SHOWN only are read, with their evidence and chart (issue
    # 34: 875 charts at 10,000 GPUs took the page to 14 s, and reading every live
    # recommendation 1 s of CPU); the headings count them all.
    first = {name: list(recs.values_list("pk", flat=True)[:REVIEW_SHOWN])
             for name, recs in lists.items()}
    views = {v.rec.pk: v for v in _views(_recommendations(Recommendation.objects.filter(
        pk__in=[pk for pks in first.values() for pk in pks])), charts=True)}
    return {
        **{name: [views[pk] for pk in pks] for name, pks in first.items()},
        "counts": {name: (len(first[name]) if len(first[name]) < REVIEW_SHOWN
                          else recs.count()) for name, recs in lists.items()},
        "shown": REVIEW_SHOWN,
        "recent": _views(recent, charts=False),
        "exemptions": list(Exemption.objects.filter(until__gt=now).select_related(
            "reservation__team", "reservation__gpu_class", "team", "gpu_class", "created_by")
            .order_by("until", "id")),
    }


def recommendation_view(*, recommendation: Recommendation) -> RecommendationView:
    """One recommendation with its evidence, chart and whole audit trail."""
    rec = _recommendations(Recommendation.objects.filter(pk=recommendation.pk))[0]
    return _views([rec], charts=True)[0]


TEAM_AUDIT_ACTIONS = Q(action__startswith="reclaim.") | Q(action="reservation.reclaim")


def team_reclaim_context(*, team: Team, now: datetime) -> dict:
    """The team page's reclaim banner: accepted and objected recommendations (which
    GPUs, why, when they go), open reclaim recommendations a lead may act on at once,
    and the team's reclaim audit entries."""
    live = _recommendations(Recommendation.objects.filter(
        reservation__team=team, status__in=Recommendation.LIVE).exclude(
        kind=K.COVERAGE_WARNING).order_by("grace_until", "id"))
    views = _views(live, charts=False)
    return {
        "reclaim_notices": [v for v in views if v.rec.status in (R.ACCEPTED, R.OBJECTED)],
        "reclaim_idle": [v for v in views if v.rec.status == R.OPEN and v.rec.kind == K.RECLAIM
                         and not v.rec.exemption_id],
        "reclaim_audit": list(AuditEntry.objects.filter(TEAM_AUDIT_ACTIONS, team=team)
                              .select_related("actor").order_by("-at", "-id")[:RECENT_LIMIT]),
        "reclaim_now": now,
    }
