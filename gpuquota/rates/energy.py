"""PUE and carbon intensity per cluster and hour (docs/accounting.md, Energy): reads of
`ClusterEnergyFactor` and `CarbonIntensityHour`, and the import of an hourly series.

For an hour of a cluster: the PUE is that of the factor in force at the hour's start; the
intensity is the imported hourly figure when there is one, else the factor's static value;
with no factor in force there is neither (the energy stays IT energy only, without CO2e)."""

import csv
import io
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from django.db import transaction
from django.db.models import Q

from gpuquota.core.errors import DomainError
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Cluster
from gpuquota.rates.models import CarbonIntensityHour, ClusterEnergyFactor


@dataclass(frozen=True)
class HourFactor:
    """What applies to one cluster-hour: PUE, g CO2e per kWh and where each came from."""

    pue: Decimal
    intensity: Decimal
    factor_id: int
    hourly_source: str | None  # the imported series' source, None for the static value


class FactorResolver:
    """The factors of some clusters over [start, end), loaded in two queries."""

    def __init__(self, *, start: datetime, end: datetime, cluster_ids=None):
        self.start, self.end = start, end
        self.factors: dict[int, list[ClusterEnergyFactor]] = {}
        factors = (ClusterEnergyFactor.objects.filter(valid_from__lt=end)
                   .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=start)))
        hours = CarbonIntensityHour.objects.filter(hour__gte=start, hour__lt=end)
        if cluster_ids is not None:
            factors = factors.filter(cluster_id__in=cluster_ids)
            hours = hours.filter(cluster_id__in=cluster_ids)
        for factor in factors.order_by("valid_from"):
            self.factors.setdefault(factor.cluster_id, []).append(factor)
        self.hours = {(h.cluster_id, h.hour): h for h in hours}
        self.by_id = {f.id: f for fs in self.factors.values() for f in fs}

    def constant(self) -> bool:
        """Whether every cluster has the same factor (or none) over the whole period and no
        hourly figure: then every hour of a cluster has the same PUE and intensity."""
        if self.hours:
            return False
        return all(
            len(fs) == 1 and fs[0].valid_from <= self.start
            and (fs[0].valid_until is None or fs[0].valid_until >= self.end)
            for fs in self.factors.values())

    def at(self, cluster_id: int | None, hour: datetime) -> HourFactor | None:
        for factor in self.factors.get(cluster_id, ()):
            if factor.valid_from <= hour and (factor.valid_until is None
                                              or hour < factor.valid_until):
                imported = self.hours.get((cluster_id, hour))
                if imported is not None:
                    return HourFactor(factor.pue, imported.carbon_intensity, factor.id,
                                      imported.source)
                return HourFactor(factor.pue, factor.carbon_intensity, factor.id, None)
        return None


DATETIME_HEADERS = ("datetime", "datetime (utc)", "hour", "timestamp")
INTENSITY_HEADERS = ("carbon_intensity", "carbon_intensity_g_per_kwh", "gco2e_per_kwh")


def _column(header: list[str], names: tuple[str, ...], what: str) -> int:
    lowered = [name.strip().lower() for name in header]
    for i, name in enumerate(lowered):
        if name in names or (what == "intensity" and name.startswith("carbon intensity")):
            return i
    raise DomainError(f"The CSV has no {what} column (one of: {', '.join(names)}).",
                      field="file")


def _hour(text: str, line: int) -> datetime:
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise DomainError(f"Line {line}: {text!r} is not an ISO 8601 time.",
                          field="file") from None
    if at.tzinfo is None:
        raise DomainError(f"Line {line}: {text!r} has no UTC offset.", field="file")
    at = at.astimezone(UTC)
    if at.minute or at.second or at.microsecond:
        raise DomainError(f"Line {line}: {text!r} is not the start of an hour.", field="file")
    return at


def _intensity(text: str, line: int) -> Decimal:
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise DomainError(f"Line {line}: {text!r} is not a number.", field="file") from None
    if not value.is_finite() or value < 0 or value >= Decimal("1000000"):
        raise DomainError(f"Line {line}: {text!r} is not an intensity in g CO2e/kWh.",
                          field="file")
    return value.quantize(Decimal("0.01"))


def carbon_intensity_parse(text: str) -> list[tuple[datetime, Decimal]]:
    """The (hour, g CO2e/kWh) rows of a CSV with a header: a time column (`datetime`,
    `Datetime (UTC)`, `hour` or `timestamp`; ISO 8601 with an offset, on the hour) and an
    intensity column (`carbon_intensity`, `carbon_intensity_g_per_kwh`, `gco2e_per_kwh`, or
    one starting with `Carbon Intensity`, as Electricity Maps' exports). Refuses the whole
    file on any bad line, naming it."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header:
        raise DomainError("The CSV is empty.", field="file")
    at_col = _column(header, DATETIME_HEADERS, "time")
    value_col = _column(header, INTENSITY_HEADERS, "intensity")
    rows: dict[datetime, Decimal] = {}
    for line, cells in enumerate(reader, start=2):
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) <= max(at_col, value_col):
            raise DomainError(f"Line {line}: too few columns.", field="file")
        hour = _hour(cells[at_col], line)
        if hour in rows:
            raise DomainError(f"Line {line}: {hour:%Y-%m-%dT%H:%MZ} appears twice.",
                              field="file")
        rows[hour] = _intensity(cells[value_col], line)
    return sorted(rows.items())


@transaction.atomic
def carbon_intensity_import(*, cluster: Cluster, rows: list[tuple[datetime, Decimal]],
                            source: str, by=None) -> int:
    """Store an hourly series of a cluster (replacing the figures of the same hours);
    returns the hours written. Statements already drafted keep their figures until they are
    drafted again."""
    source = source.strip()
    if not source or len(source) > 200:
        raise DomainError("Name the source (up to 200 characters).", field="source")
    if not rows:
        return 0
    CarbonIntensityHour.objects.bulk_create(
        [CarbonIntensityHour(cluster=cluster, hour=hour, carbon_intensity=value, source=source)
         for hour, value in rows],
        update_conflicts=True, unique_fields=["cluster", "hour"],
        update_fields=["carbon_intensity", "source"])
    audit_record(actor=by, action="carbon_intensity.import", obj=cluster,
                 changes={"hours": len(rows), "first": rows[0][0].isoformat(),
                          "last": rows[-1][0].isoformat(), "source": source})
    return len(rows)
