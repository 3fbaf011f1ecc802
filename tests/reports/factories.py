"""A small billed month for lifecycle, API and mail tests: one team, one H100 reserved
for 10 hours of October 2026 at 2.50 (25.00), no telemetry (nothing to sweep)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpuquota.core.timeutil import Period
from gpuquota.reservations.models import Assignment
from tests.factories import GpuClassFactory, RateCardFactory, make_gpu
from tests.usage.factories import reserve

OCTOBER = Period.month(2026, 10)
NOVEMBER = Period.month(2026, 11)
OCT_3 = datetime(2026, 10, 3, tzinfo=UTC)
SETTLED = datetime(2026, 11, 4, tzinfo=UTC)  # October's end + 72 h
H = timedelta(hours=1)


def h100(**card):
    gpu_class = GpuClassFactory(name="H100-80GB")
    if card is not None:
        RateCardFactory(gpu_class=gpu_class, **{"reserved_rate": Decimal("2.50"), **card})
    return gpu_class


def reserved_hours(team, gpu_class, start: datetime, hours: int) -> Assignment:
    """`hours` of one GPU of the class reserved by the team from `start`."""
    return reserve(team, make_gpu(gpu_class=gpu_class), start, start + hours * H)
