"""Facility energy and carbon per statement line (docs/accounting.md, Energy): the rollups'
IT energy per team, class and kind, cluster by cluster and hour by hour, times the PUE of
the cluster's facility in force at that hour, times the carbon intensity of that hour (an
imported hourly figure, else the static one: `gpuquota.rates.energy`).

Exact throughout: joules as `Decimal(str(float))` per (cluster, hour) group, products in a
60-digit context; each line's figures are rounded once (kWh and kg to 3 places, half up).
Energy of an hour whose cluster has no factor in force has no facility energy and no CO2e:
the line's facility kWh and CO2e are then empty (unknown, never a partial figure), and the
statement's basis names the cluster and its hours. The idle-reserved energy of a reserved
GPU-hour row is its energy times its idle seconds over its covered seconds (the rollups
keep one energy per row, not per second). Information only: no amount uses it."""

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext

from django.db.models import (
    BigIntegerField,
    Case,
    F,
    FloatField,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, NullIf

from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import Cluster, Gpu, GpuNodeInterval
from gpuquota.rates.energy import FactorResolver
from gpuquota.usage.models import GpuHourUsage
from reports.energy import J_PER_KWH, LINE_KIND, PRICED_KINDS

PLACES = Decimal("0.001")
G_J_PER_KG_KWH = J_PER_KWH * 1000  # g·J/kWh → kg
WIDE = Context(prec=60)
ZERO = Decimal(0)


@dataclass
class Sums:
    """Exact sums of one team's class and kind: IT joules, facility joules, facility joules
    × g/kWh, the same for its idle-reserved part, and the joules without a factor."""

    it_j: Decimal = ZERO
    facility_j: Decimal = ZERO
    co2e: Decimal = ZERO
    idle_j: Decimal = ZERO
    idle_co2e: Decimal = ZERO
    unfactored_j: Decimal = ZERO


@dataclass
class TeamCarbon:
    sums: dict[tuple[int, str], Sums] = field(default_factory=lambda: defaultdict(Sums))
    factors: set = field(default_factory=set)  # factor ids used
    hourly: dict = field(default_factory=lambda: defaultdict(set))  # (cluster, source) → hours
    missing: dict = field(default_factory=lambda: defaultdict(set))  # cluster id → hours
    resolver: FactorResolver | None = None
    names: dict = field(default_factory=dict)  # cluster id → name


def _moved_gpu_ids(period: Period) -> list[int]:
    """The GPUs that were on another cluster's node than their current one in the period."""
    return list(GpuNodeInterval.objects.filter(valid_from__lt=period.end)
                .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=period.start))
                .exclude(node__cluster_id=F("gpu__node__cluster_id"))
                .values_list("gpu_id", flat=True).distinct())


def _cluster_at_hour(moved_ids: list[int]):
    """The GPU's cluster at the row's hour: its current node's (a join), except for the
    GPUs that moved between clusters (rare: a node history read per row only for them)."""
    current = F("gpu__node__cluster_id")
    if not moved_ids:
        return current
    at_hour = GpuNodeInterval.objects.filter(
        gpu_id=OuterRef("gpu_id"), valid_from__lte=OuterRef("hour")).filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=OuterRef("hour")))
    return Case(When(gpu_id__in=moved_ids,
                     then=Coalesce(Subquery(at_hour.values("node__cluster_id")[:1]), current,
                                   output_field=BigIntegerField())),
                default=current, output_field=BigIntegerField())


def _rows(period: Period, team_ids: list[int], hourly: bool) -> list[dict]:
    """The month's energy per team, class, kind and cluster (and hour when `hourly`): per
    GPU without a join when no hour is needed and no GPU moved between clusters (the
    GPUs' clusters then read once), else per cluster through the GPU's node."""
    idle = Case(When(kind="reserved", then=F("energy_j") * (F("covered_s") - F("busy_s"))
                     / NullIf(Cast("covered_s", FloatField()), Value(0.0))),
                default=Value(0.0), output_field=FloatField())
    sums = {"joules": Sum(F("energy_j") / Cast("split_ways", FloatField())), "idle_j": Sum(idle)}
    usage = GpuHourUsage.objects.filter(hour__gte=period.start, hour__lt=period.end,
                                        team_id__in=team_ids, energy_j__gt=0)
    moved = _moved_gpu_ids(period)
    if not hourly and not moved:
        rows = list(usage.values("team_id", "gpu_class_id", "kind", "gpu_id")
                    .annotate(**sums).order_by())
        cluster_of = dict(Gpu.objects.filter(pk__in={row["gpu_id"] for row in rows})
                          .values_list("pk", "node__cluster_id"))
        for row in rows:
            row["cluster_id"] = cluster_of[row["gpu_id"]]
        return rows
    return list(usage.annotate(cluster_id=_cluster_at_hour(moved))
                .values("team_id", "gpu_class_id", "kind", "cluster_id",
                        *(["hour"] if hourly else []))
                .annotate(**sums).order_by())


def carbon_by_team(*, period: Period, team_ids: list[int]) -> dict[int, TeamCarbon]:
    """Per team: exact energy and carbon sums per (GPU class, line kind) over the whole
    hours of `period`, and what they were computed with. The GPU's cluster at an hour is
    that of its node at the hour's start (its current node when no history says)."""
    factors = FactorResolver(start=period.start, end=period.end)
    # hour by hour only where the PUE or intensity may change within the period
    rows = _rows(period, team_ids, hourly=not factors.constant())
    out: dict[int, TeamCarbon] = defaultdict(TeamCarbon)
    with localcontext(WIDE):
        for row in rows:
            team = out[row["team_id"]]
            sums = team.sums[(row["gpu_class_id"], LINE_KIND[row["kind"]])]
            joules = Decimal(str(row["joules"]))
            idle_j = Decimal(str(row["idle_j"] or 0.0))
            sums.it_j += joules
            sums.idle_j += idle_j
            factor = factors.at(row["cluster_id"], row.get("hour", period.start))
            if factor is None:
                sums.unfactored_j += joules
                team.missing[row["cluster_id"]].add(row.get("hour"))
                continue
            sums.facility_j += joules * factor.pue
            sums.co2e += joules * factor.pue * factor.intensity
            sums.idle_co2e += idle_j * factor.pue * factor.intensity
            team.factors.add(factor.factor_id)
            if factor.hourly_source is not None:
                team.hourly[(row["cluster_id"], factor.hourly_source)].add(row["hour"])
    names = dict(Cluster.objects.filter(pk__in={row["cluster_id"] for row in rows})
                 .values_list("pk", "name")) if rows else {}
    for team in out.values():
        team.resolver, team.names = factors, names
    return dict(out)


def _q(value: Decimal) -> Decimal:
    return value.quantize(PLACES, rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class LineCarbon:
    energy_kwh: Decimal | None = None
    facility_kwh: Decimal | None = None
    co2e_kg: Decimal | None = None
    idle_kwh: Decimal | None = None
    idle_co2e_kg: Decimal | None = None


def lines_carbon(lines, carbon: TeamCarbon | None) -> list[LineCarbon]:
    """Per line (objects with `kind`, `gpu_class_id`, `seconds`): its share by seconds of
    its class and kind's sums, each figure rounded once; empty figures for credits and
    adjustments, facility and CO2e empty where some of the energy had no factor, idle
    figures on reserved lines only."""
    totals: dict[tuple, int] = defaultdict(int)
    for line in lines:
        if line.kind in PRICED_KINDS:
            totals[(line.gpu_class_id, line.kind)] += line.seconds
    out = []
    with localcontext(WIDE):
        for line in lines:
            if line.kind not in PRICED_KINDS:
                out.append(LineCarbon())
                continue
            key = (line.gpu_class_id, line.kind)
            sums = carbon.sums.get(key, Sums()) if carbon else Sums()
            share = Decimal(line.seconds) / totals[key] if totals[key] else ZERO
            factored = sums.unfactored_j == 0
            reserved = line.kind == "reserved"
            out.append(LineCarbon(
                energy_kwh=_q(sums.it_j * share / J_PER_KWH),
                facility_kwh=_q(sums.facility_j * share / J_PER_KWH) if factored else None,
                co2e_kg=_q(sums.co2e * share / G_J_PER_KG_KWH) if factored else None,
                idle_kwh=_q(sums.idle_j * share / J_PER_KWH) if reserved else None,
                idle_co2e_kg=(_q(sums.idle_co2e * share / G_J_PER_KG_KWH)
                              if reserved and factored else None)))
    return out


def carbon_basis(carbon: TeamCarbon | None) -> list[dict]:
    """What a statement's figures were computed with, a cluster per entry: its factors
    (PUE, static intensity, source, effective dates), the hours an imported series replaced
    the static intensity (per source), and the hours with energy but no factor."""
    if carbon is None:
        return []
    resolver, names = carbon.resolver, carbon.names
    entries: dict[int, dict] = {}

    def entry(cluster_id):
        return entries.setdefault(cluster_id, {"cluster": names.get(cluster_id, "unknown"),
                                               "factors": [], "hourly": [],
                                               "missing_hours": 0})
    for factor in sorted((resolver.by_id[i] for i in carbon.factors),
                         key=lambda f: (f.cluster_id, f.valid_from)):
        entry(factor.cluster_id)["factors"].append({
            "pue": str(factor.pue), "carbon_intensity": str(factor.carbon_intensity),
            "source": factor.source, "valid_from": factor.valid_from.isoformat(),
            "valid_until": factor.valid_until.isoformat() if factor.valid_until else None})
    for (cluster_id, source), hours in sorted(carbon.hourly.items(), key=lambda i: i[0]):
        entry(cluster_id)["hourly"].append({"source": source, "hours": len(hours)})
    for cluster_id, hours in carbon.missing.items():
        # read per cluster (no factor the whole period), the hours are not counted: None
        entry(cluster_id)["missing_hours"] = None if None in hours else len(hours)
    return [entries[k] for k in sorted(entries, key=lambda k: entries[k]["cluster"])]
