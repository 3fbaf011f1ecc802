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


def _day(text: str | None) -> str:
    """An instant as its UTC day, with the time when not midnight."""
    if not text:
        return ""
    return text[:10] if text[11:19] == "00:00:00" else f"{text[:10]} {text[11:16]} UTC"


def basis_texts(basis: list[dict]) -> list[str]:
    """A statement's `energy_basis` as sentences, a cluster each (page, PDF)."""
    texts = []
    for entry in basis:
        parts = [
            f"PUE {f['pue']}, {f['carbon_intensity']} g CO2e/kWh ({f['source']}) from "
            f"{_day(f['valid_from'])}" + (f" until {_day(f['valid_until'])}"
                                          if f["valid_until"] else "")
            for f in entry["factors"]]
        parts += [f"hourly intensity for {h['hours']} h ({h['source']})"
                  for h in entry["hourly"]]
        if entry["missing_hours"]:
            parts.append(f"{entry['missing_hours']} h without a PUE and intensity (no CO2e)")
        elif entry["missing_hours"] is None:
            parts.append("no PUE and intensity in the period (no CO2e)")
        texts.append(f"{entry['cluster']}: " + "; ".join(parts))
    return texts


def _total(values) -> Decimal | None:
    values = list(values)
    if not values or any(v is None for v in values):
        return None
    return sum(values, Decimal("0.000"))


def statement_energy(statement, lines) -> dict | None:
    """The statement's energy section: per priced line its kWh, facility kWh and kg CO2e,
    the idle-reserved energy as a row of its own (part of the reserved lines' energy), the
    totals (sums of the lines' figures; empty when one is unknown) and the basis. None when
    no line kept energy."""
    kept = [line for line in lines if line.energy_kwh is not None]
    if not kept:
        return None
    reserved = [line for line in kept if line.kind == "reserved"]
    idle = None
    if reserved and all(line.idle_energy_kwh is not None for line in reserved):
        idle = {"energy_kwh": _total(line.idle_energy_kwh for line in reserved),
                "co2e_kg": _total(line.idle_co2e_kg for line in reserved)}
    return {
        "lines": kept,
        "idle": idle,
        "energy_kwh": _total(line.energy_kwh for line in kept),
        "facility_kwh": _total(line.facility_energy_kwh for line in kept),
        "co2e_kg": _total(line.co2e_kg for line in kept),
        "basis": basis_texts(statement.energy_basis or []),
    }
