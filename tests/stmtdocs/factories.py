"""Months with real usage for the statement pages and mail: reservations, samples and rate
cards, rolled up and drafted through the public services. The clock is 2026-11-10 12:00 UTC:
October is closed and open for approval (it opens on 2026-11-04), November is to date."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpuquota.core.timeutil import Period
from gpuquota.usage.sweep import dirty_hours_process
from reports.services_statements import statements_draft_month
from tests.factories import GpuClassFactory, NodeFactory, RateCardFactory, make_gpu
from tests.usage.factories import minute_samples, reserve

NOW = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
SEPTEMBER, OCTOBER, NOVEMBER = (Period.month(2026, m) for m in (9, 10, 11))


def priced_gpus(count: int = 2):
    """`count` H100 GPUs on one node, priced 2.50 reserved and 3.00 on demand per hour."""
    gpu_class = GpuClassFactory(name="H100-80GB")
    RateCardFactory(gpu_class=gpu_class, reserved_rate=Decimal("2.50"))
    node = NodeFactory()
    return [make_gpu(node=node, gpu_class=gpu_class, index=i) for i in range(count)]


def reserved_hours(team, gpu, start: datetime, hours: int, *, reported_minutes: int) -> None:
    """`hours` reserved from `start`, of which the first `reported_minutes` were reported busy."""
    reserve(team, gpu, start, start + timedelta(hours=hours))
    if reported_minutes:
        minute_samples(gpu, start, reported_minutes, util=60)


def draft(*periods: Period, now: datetime = NOW) -> None:
    dirty_hours_process()
    for period in periods:
        statements_draft_month(period=period, now=now)
