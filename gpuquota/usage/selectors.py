"""Reads of usage: utilization versus allocation (accounting.md, section of that
name) per reservation, team, class and fleet, for any period.

Whole hours of a period come from the hourly rollups (one aggregate query);
the partial hours at arbitrary edges are computed from the samples with the same
rule, in a fixed number of queries. Reserved and failed seconds come straight
from assignments and health intervals (SQL aggregates in `seconds`), never from rollups.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db.models import Max, Q, Sum
from django.utils import timezone

from accounts.models import Team
from gpuquota.core.errors import DomainError
from gpuquota.core.fields import whole_second
from gpuquota.core.timeutil import Period, hour_floor
from gpuquota.ingest.partitions import raw_data_horizon
from gpuquota.inventory.models import GpuClass
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.usage.figures import FleetFigures, Sums, UsageFigures, display_decimal, sums_by
from gpuquota.usage.lent import lent_busy_fold, lent_gpu_ids, lent_seconds
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.rollup import BORROWED, RESERVED, UNRESERVED, usage_buckets, usage_inputs_load
from gpuquota.usage.seconds import (  # noqa: F401  (re-exported for chargeback)
    failed_qs,
    failed_reserved_qs,
    failed_reserved_seconds,
    failed_reserved_seconds_by_class,
    failed_seconds_by_class,
    in_service_qs,
    in_service_seconds_by_class,
    reserved_qs,
    reserved_seconds,
    reserved_seconds_by_class,
    seconds_total,
)

KEY_FIELDS = ("kind", "gpu_class_id", "reservation_id", "team_id", "split_ways", "failed")
HOUR = timedelta(hours=1)


def period_to_date(period: Period, now: datetime | None = None) -> Period:
    """The period clipped at now (whole seconds): a period not yet ended is 'to date'."""
    return period.to_date(whole_second(now or timezone.now()))


LAST_SPANS = {"24h": timedelta(hours=24), "7d": timedelta(days=7)}


def period_last(*, span: timedelta, now: datetime | None = None) -> Period:
    """[hour_floor(now) - span, now): whole UTC hours back, plus the current hour to date."""
    now = whole_second(now or timezone.now())
    return Period(hour_floor(now) - span, now)


def rollups_past_horizon(*, start: datetime, end: datetime | None = None,
                         gpu_id: int | None = None,
                         gpu_class_id: int | None = None) -> datetime | None:
    """The raw-data horizon when rollup rows of the GPU (or of the class) lie in the hours
    from `start` (before `end`) that precede it, so could not be recomputed; else None."""
    horizon = raw_data_horizon()
    first = hour_floor(start)
    if first >= horizon:
        return None
    rows = GpuHourUsage.objects.filter(hour__gte=first,
                                       hour__lt=horizon if end is None else min(end, horizon))
    if gpu_id is not None:
        rows = rows.filter(gpu_id=gpu_id)
    if gpu_class_id is not None:
        rows = rows.filter(gpu_class_id=gpu_class_id)
    return horizon if rows.exists() else None


def _hour_ceil(value: datetime) -> datetime:
    floor = hour_floor(value)
    return floor if floor == value else floor + HOUR


def _split(period: Period) -> tuple[tuple[datetime, datetime] | None, list[tuple]]:
    """(whole hours, [partial edge windows]) of a period."""
    first, last = _hour_ceil(period.start), hour_floor(period.end)
    if first >= last:
        edges = [(period.start, period.end)] if period.start < period.end else []
        _edges_have_raw_data(edges)
        return None, edges
    edges = [(a, b) for a, b in ((period.start, first), (last, period.end)) if a < b]
    _edges_have_raw_data(edges)
    return (first, last), edges


def _edges_have_raw_data(edges: list[tuple]) -> None:
    """A partial hour is computed from raw samples: refuse it once they have expired,
    rather than give a figure short of those seconds."""
    horizon = raw_data_horizon()
    if any(start < horizon for start, _end in edges):
        raise DomainError(
            f"Raw samples before {horizon:%Y-%m-%d %H:%M}Z have expired: a period starting "
            "or ending that early must start and end on whole UTC hours.", field="period")


def usage_rows(*, period: Period, edge_gpu_ids: Callable[[datetime, datetime], list | None],
               key_fields: tuple[str, ...] = KEY_FIELDS, **filters) -> list[dict]:
    """Rollup sums over `period` grouped by bucket (`key_fields`), for the buckets
    matching `filters` (field=value on those fields). `edge_gpu_ids(start, end)` says which
    GPUs a partial edge hour must be computed for (None: all)."""
    hours, edges = _split(period)
    rows: list[dict] = []
    if hours is not None:
        rows += list(
            GpuHourUsage.objects.filter(hour__gte=hours[0], hour__lt=hours[1], **filters)
            .values(*key_fields)
            .annotate(covered_s=Sum("covered_s"), busy_s=Sum("busy_s"),
                      util_weighted=Sum("util_weighted"))
            .order_by()
        )
    for start, end in edges:
        gpu_ids = edge_gpu_ids(start, end)
        if gpu_ids is not None and not gpu_ids:
            continue
        inputs = usage_inputs_load(gpu_ids=gpu_ids, start=start, end=end)
        for gpu_id in inputs.devices:
            if gpu_id not in inputs.current_class:
                continue  # a MIG device whose parent is not in scope
            for key, bucket in usage_buckets(inputs=inputs, gpu_id=gpu_id).items():
                row = {name: getattr(key, name) for name in key_fields}
                if all(row[name] == value for name, value in filters.items()):
                    row.update(covered_s=bucket.covered_s, busy_s=bucket.busy_s,
                               util_weighted=bucket.util_weighted)
                    rows.append(row)
    return rows


def _assigned_gpu_ids(**filters) -> Callable[[datetime, datetime], list]:
    def ids(start: datetime, end: datetime) -> list:
        return list(
            Assignment.objects.filter(assigned_from__lt=end, assigned_until__gt=start, **filters)
            .values_list("gpu_id", flat=True).distinct()
        )
    return ids


def lent_busy_seconds(*, period: Period, reservation_ids: set[int]) -> dict[int, Fraction]:
    """Borrowed busy seconds (failed time left out) per reservation of `reservation_ids`:
    what others ran on their lent GPUs (accounting.md, Lending)."""
    if not reservation_ids:
        return {}
    rows = usage_rows(period=period, edge_gpu_ids=lent_gpu_ids(reservation_ids=reservation_ids),
                      key_fields=("kind", "reservation_id", "split_ways", "failed"),
                      kind=BORROWED, failed=False)
    return lent_busy_fold(rows, reservation_ids)


def lending_figures(figures: list[UsageFigures], reservation_ids: list[int], *,
                    period: Period, team: Team) -> None:
    """Fill in `lent_s` and `lent_busy_s` of each reservation's figures (same order)."""
    lent = lent_seconds(period=period, assignment__reservation__team=team)
    busy = lent_busy_seconds(period=period, reservation_ids=set(lent))
    for rid, f in zip(reservation_ids, figures, strict=True):
        f.lent_s, f.lent_busy_s = lent.get(rid, 0), busy.get(rid, Fraction(0))


def team_utilization(*, team: Team, period: Period) -> UsageFigures:
    """Reserved, covered, busy seconds and mean utilization over all reservations of a
    team (reserved time only), and the time its GPUs were lent."""
    rows = usage_rows(period=period, edge_gpu_ids=_assigned_gpu_ids(reservation__team=team),
                      kind=RESERVED, team_id=team.id)
    lent = lent_seconds(period=period, assignment__reservation__team=team)
    return UsageFigures(
        reserved_s=seconds_total(reserved_qs(period, reservation__team=team)),
        failed_reserved_s=seconds_total(failed_reserved_qs(period, reservation__team=team)),
        sums=sums_by(rows, lambda r: None).get(None, Sums()),
        lent_s=sum(lent.values()),
        lent_busy_s=sum(lent_busy_seconds(period=period, reservation_ids=set(lent)).values(),
                        Fraction(0)),
    )


@dataclass
class ReservationUsage:
    reservation: Reservation
    figures: UsageFigures


def team_reservations_utilization(*, team: Team, period: Period) -> list[ReservationUsage]:
    """Per reservation of the team overlapping the period: reserved versus busy.
    A fixed number of queries whatever the number of reservations."""
    assigned = Q(reservation__team=team)
    reserved = seconds_total(reserved_qs(period, reservation__team=team), "reservation_id")
    failed = seconds_total(failed_reserved_qs(period, reservation__team=team), "reservation_id")
    rows = usage_rows(period=period, edge_gpu_ids=_assigned_gpu_ids(reservation__team=team),
                      kind=RESERVED, team_id=team.id)
    sums = sums_by(rows, lambda r: r["reservation_id"])
    ids = set(reserved) | set(sums) | set(
        Assignment.objects.filter(assigned, assigned_from__lt=period.end,
                                  assigned_until__gt=period.start)
        .values_list("reservation_id", flat=True)
    )
    reservations = Reservation.objects.filter(id__in=ids).select_related("gpu_class").annotate(
        effective_end=Max("assignments__assigned_until"))
    result = [
        ReservationUsage(r, UsageFigures(reserved.get(r.id, 0), failed.get(r.id, 0),
                                         sums.get(r.id, Sums())))
        for r in sorted(reservations, key=lambda r: (r.start, r.id))
    ]
    lending_figures([row.figures for row in result], [row.reservation.id for row in result],
                    period=period, team=team)
    return result


def unreserved_busy_by_team(*, period: Period, gpu_class: GpuClass | None = None
                            ) -> dict[int | None, Fraction]:
    """Busy seconds outside any assignment per owner team (None: unattributed), exact
    shares of multi-team windows, failed time excluded."""
    filters = {"gpu_class_id": gpu_class.id} if gpu_class else {}
    rows = usage_rows(period=period, edge_gpu_ids=lambda s, e: None, kind=UNRESERVED, **filters)
    return {team: sums.ok_busy_s
            for team, sums in sums_by(rows, lambda r: r["team_id"]).items() if sums.ok_busy_s}


def on_demand_busy_seconds(*, period: Period) -> list[dict]:
    """For chargeback: unreserved, non-failed busy seconds grouped by (team, class,
    split_ways) as integers; a team's exact share is Σ busy_s / split_ways. Exact at
    any whole-second edges (a rate change inside an hour: call it per rate interval)."""
    rows = usage_rows(period=period, edge_gpu_ids=lambda s, e: None, kind=UNRESERVED,
                      failed=False)
    grouped: dict[tuple, int] = {}
    for row in rows:
        key = (row["team_id"], row["gpu_class_id"], row["split_ways"])
        grouped[key] = grouped.get(key, 0) + int(row["busy_s"])
    return [{"team_id": t, "gpu_class_id": c, "split_ways": n, "busy_s": s}
            for (t, c, n), s in sorted(grouped.items(), key=str) if s]


def fleet_utilization(*, period: Period) -> FleetFigures:
    """Fleet busy seconds (reserved or not) over in-service, non-failed GPU seconds,
    and the reserved figures of the whole fleet."""
    rows = usage_rows(period=period, edge_gpu_ids=lambda s, e: None)
    all_sums = sums_by(rows, lambda r: None).get(None, Sums())
    reserved_sums = sums_by([r for r in rows if r["kind"] == RESERVED], lambda r: None)
    return FleetFigures(
        in_service_s=seconds_total(in_service_qs(period)),
        failed_s=seconds_total(failed_qs(period)),
        sums=all_sums,
        reserved=UsageFigures(
            reserved_s=seconds_total(reserved_qs(period)),
            failed_reserved_s=seconds_total(failed_reserved_qs(period)),
            sums=reserved_sums.get(None, Sums()),
        ),
    )


def classes_utilization(*, period: Period) -> list[tuple[GpuClass, FleetFigures]]:
    """Per GPU class (the class in force at each second): the fleet figures."""
    rows = usage_rows(period=period, edge_gpu_ids=lambda s, e: None)
    by_class = sums_by(rows, lambda r: r["gpu_class_id"])
    reserved_by_class = sums_by([r for r in rows if r["kind"] == RESERVED],
                                lambda r: r["gpu_class_id"])
    in_service = in_service_seconds_by_class(period=period)
    failed = failed_seconds_by_class(period=period)
    reserved = reserved_seconds_by_class(period=period)
    failed_reserved = failed_reserved_seconds_by_class(period=period)
    ids = set(in_service) | set(by_class) | set(reserved)
    return [
        (klass, FleetFigures(
            in_service_s=in_service.get(klass.id, 0), failed_s=failed.get(klass.id, 0),
            sums=by_class.get(klass.id, Sums()),
            reserved=UsageFigures(reserved.get(klass.id, 0), failed_reserved.get(klass.id, 0),
                                  reserved_by_class.get(klass.id, Sums())),
        ))
        for klass in GpuClass.objects.filter(id__in=ids).order_by("name")
    ]


def unreserved_busy_hours_named(*, period: Period) -> list[dict]:
    """Unreserved busy hours per owner team (name and slug; `Unattributed` and no slug
    for none), display-rounded, largest first."""
    return owner_rows(unreserved_busy_by_team(period=period))


def owner_rows(shares: dict) -> list[dict]:
    """{owner team id or None: exact busy seconds} as named rows, largest first."""
    teams = {row[0]: row[1:] for row in Team.objects.filter(
        id__in=[t for t in shares if t]).values_list("id", "name", "slug")}
    rows = [{"team": teams[t][0] if t in teams else "Unattributed",
             "slug": teams[t][1] if t in teams else None,
             "hours": display_decimal(s / 3600), "seconds": s} for t, s in shares.items()]
    return sorted(rows, key=lambda r: -r["seconds"])


@dataclass
class GpuUsage:
    """One assigned GPU over a window, failed time left out (reclaim's evidence)."""

    gpu_id: int
    covered_s: int = 0
    busy_s: int = 0
    util_weighted: Decimal = Decimal(0)
    memory_used_bytes_max: int | None = None
    process_count: int = 0
    users_seen: set = field(default_factory=set)

    @property
    def busy_fraction(self) -> Fraction | None:
        return Fraction(self.busy_s, self.covered_s) if self.covered_s else None

    @property
    def mean_util_gpu(self) -> Fraction | None:
        return Fraction(self.util_weighted) / self.covered_s if self.covered_s else None

    def add(self, *, covered_s, busy_s, util_weighted, memory, processes, users) -> None:
        self.covered_s += covered_s
        self.busy_s += busy_s
        self.util_weighted += util_weighted
        if memory is not None:
            self.memory_used_bytes_max = max(self.memory_used_bytes_max or 0, memory)
        self.process_count += processes  # per hour: an upper bound across hours
        self.users_seen.update(users)


def reservation_gpu_usage(*, reservation: Reservation, period: Period) -> dict[int, GpuUsage]:
    """Per GPU of the reservation: covered and busy seconds inside its assignments over
    the period (exact at any edge), mean utilization, peak memory, users seen."""
    usage = reservations_gpu_usage(reservation_ids=[reservation.id], period=period)
    return {gpu_id: u for (_r, gpu_id), u in usage.by_gpu.items()}


@dataclass
class ReservationsGpuUsage:
    """`reservations_gpu_usage`: per (reservation id, GPU id) its usage over the period,
    and its busy seconds per whole hour (epoch seconds of the hour) from the rollups."""

    by_gpu: dict[tuple[int, int], GpuUsage] = field(default_factory=dict)
    busy_by_hour: dict[tuple[int, int], dict[int, int]] = field(default_factory=dict)
    whole_hours: tuple[datetime, datetime] | None = None
    #: the partial edge hours computed from the samples, and per reservation id, edge and
    #: GPU id their part of `by_gpu` (none: nothing reported there)
    edges: list[tuple[datetime, datetime]] = field(default_factory=list)
    by_edge: dict[int, dict[tuple[datetime, datetime], dict[int, GpuUsage]]] = field(
        default_factory=dict)

    def add(self, key: tuple[int, int], **sums) -> None:
        self.by_gpu.setdefault(key, GpuUsage(key[1])).add(**sums)


def reservations_gpu_usage(*, reservation_ids: list[int], period: Period) -> ReservationsGpuUsage:
    """`reservation_gpu_usage` for many reservations at once: one rollup query for the
    whole hours, and a fixed number per partial edge, whatever their number."""
    result = ReservationsGpuUsage()
    hours, edges = _split(period)
    result.whole_hours = hours
    wanted = set(reservation_ids)
    if hours is not None and wanted:
        rows = GpuHourUsage.objects.filter(
            hour__gte=hours[0], hour__lt=hours[1], reservation_id__in=wanted, failed=False,
            kind=RESERVED,
        ).values_list("reservation_id", "gpu_id", "hour", "covered_s", "busy_s",
                      "util_weighted", "memory_used_bytes_max", "process_count", "users_seen")
        for rid, gpu_id, hour, covered, busy, weighted, memory, processes, users in rows:
            result.add((rid, gpu_id), covered_s=covered, busy_s=busy, util_weighted=weighted,
                       memory=memory, processes=processes, users=users)
            per_hour = result.busy_by_hour.setdefault((rid, gpu_id), {})
            at = int(hour.timestamp())
            per_hour[at] = per_hour.get(at, 0) + busy
    result.edges = edges
    for start, end in edges:
        gpu_ids = _assigned_gpu_ids(reservation_id__in=wanted)(start, end) if wanted else []
        if not gpu_ids:
            continue
        inputs = usage_inputs_load(gpu_ids=gpu_ids, start=start, end=end)
        for gpu_id in gpu_ids:
            for key, b in usage_buckets(inputs=inputs, gpu_id=gpu_id).items():
                if key.reservation_id in wanted and not key.failed and key.kind == RESERVED:
                    sums = {"covered_s": b.covered_s, "busy_s": b.busy_s,
                            "util_weighted": b.util_weighted,
                            "memory": b.memory_used_bytes_max,
                            "processes": len(b.processes), "users": b.users}
                    result.add((key.reservation_id, gpu_id), **sums)
                    edge = result.by_edge.setdefault(key.reservation_id, {}).setdefault(
                        (start, end), {})
                    edge.setdefault(gpu_id, GpuUsage(gpu_id)).add(**sums)
    return result
