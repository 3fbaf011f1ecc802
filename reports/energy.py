"""Energy per team (docs/budgets.md, "Energy"): the joules the agents' energy counters
reported (`energy_j` of each sample window, summed into the hourly rollups with the
seconds they cover) by team, GPU class and kind of time, converted to kWh.

Whose energy: a rollup row's energy is its covered seconds' energy, so it follows the
seconds: a reserved GPU's energy is the reserving team's, idle or busy (and during a loan,
as the loan's covered seconds stay the reserving team's); unreserved time's energy is its
owner teams', shared equally like its seconds (`energy_j / split_ways`); unattributed
time's is nobody's. A window without `energy_j` (no counter, a counter reset, the importer's
reset) adds nothing: there is no estimate. Energy is information: it changes no amount."""

from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import F, FloatField, Sum
from django.db.models.functions import Cast

from gpuquota.core.timeutil import Period
from gpuquota.usage.models import GpuHourUsage

J_PER_KWH = Decimal(3_600_000)
KWH_PLACES = Decimal("0.001")
LINE_KIND = {"reserved": "reserved", "unreserved": "on_demand", "borrowed": "borrowed"}
PRICED_KINDS = set(LINE_KIND.values())


def kwh(joules: float | Decimal) -> Decimal:
    """Joules as kWh, to the Wh (half up)."""
    return (Decimal(str(joules)) / J_PER_KWH).quantize(KWH_PLACES, rounding=ROUND_HALF_UP)


def energy_by_team(*, period: Period, team_ids: list[int] | None = None
                   ) -> dict[int, dict[tuple[int, str], float]]:
    """Joules per team, per (GPU class, statement line kind) over the whole UTC hours of
    `period` (a month, or a month to date rounded down to the hour)."""
    rows = GpuHourUsage.objects.filter(hour__gte=period.start, hour__lt=period.end,
                                       team__isnull=False, energy_j__gt=0)
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    sums = (rows.values("team_id", "gpu_class_id", "kind")
            .annotate(joules=Sum(F("energy_j") / Cast("split_ways", FloatField())))
            .order_by())
    out: dict[int, dict[tuple[int, str], float]] = defaultdict(dict)
    for row in sums:
        out[row["team_id"]][(row["gpu_class_id"], LINE_KIND[row["kind"]])] = row["joules"]
    return dict(out)


def team_energy_kwh(*, team_id: int, period: Period) -> Decimal:
    """A team's kWh over `period`."""
    joules = sum(energy_by_team(period=period, team_ids=[team_id]).get(team_id, {}).values())
    return kwh(joules)


def statement_energy_kwh(lines) -> Decimal | None:
    """The kWh a statement's lines kept (None when none kept any: drafted before energy was
    kept, or only credits and adjustments)."""
    kept = [line.energy_kwh for line in lines if line.energy_kwh is not None]
    return sum(kept, Decimal("0.000")) if kept else None
