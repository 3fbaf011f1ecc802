"""A job's report (docs/jobs.md): the samples of the GPUs it held while it ran, judged by
`analysis.analyse`, and priced at the on-demand rate of the rate cards in force, exactly:
Σ seconds × rate / 3600 as a fraction, rounded once, half up, to the cent."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from django.db.models import Q

from gpuquota.ingest.models import Sample
from gpuquota.inventory.models import Gpu, GpuClassInterval
from gpuquota.jobs import conf
from gpuquota.jobs.analysis import Analysis, GpuSeries, JobFacts, Point, analyse
from gpuquota.jobs.models import Job
from gpuquota.rates.models import RateCard

CENT = Decimal("0.01")
CHART_BUCKETS = 60


def cents(value: Fraction) -> Decimal:
    """`value` rounded half away from zero to 0.01, exactly (the one rounding)."""
    hundredths = Fraction(value) * 100
    whole = (2 * abs(hundredths.numerator) + hundredths.denominator) // (2 * hundredths.denominator)
    return (Decimal(-whole if hundredths < 0 else whole).scaleb(-2)).quantize(CENT)


@dataclass
class JobReport:
    job: Job
    end: datetime
    analysis: Analysis
    series: list[GpuSeries]
    classes: dict[str, str]  # GPU key -> class name
    cost_exact: Fraction | None
    currency: str

    @property
    def cost(self) -> Decimal | None:
        return None if self.cost_exact is None else cents(self.cost_exact)

    def wasted_cost_exact(self, wasted_gpu_s: int) -> Fraction | None:
        """The money `wasted_gpu_s` GPU-seconds of this job cost, at its mean rate."""
        held = self.analysis.held_gpu_s
        if self.cost_exact is None or not held:
            return None
        return self.cost_exact * wasted_gpu_s / held

    def wasted_cost(self, wasted_gpu_s: int) -> Decimal | None:
        exact = self.wasted_cost_exact(wasted_gpu_s)
        return None if exact is None else cents(exact)


def _gpu_key(gpu: Gpu) -> str:
    return f"{gpu.node.hostname}/{gpu.index if gpu.index is not None else gpu.uuid[:12]}"


def job_series(*, job: Job, end: datetime) -> tuple[list[GpuSeries], list[Gpu]]:
    """The samples of each GPU the job held over [start, end), oldest first."""
    gpus = list(Gpu.objects.filter(pk__in=job.job_gpus.values("gpu_id"))
                .select_related("node", "gpu_class", "parent").order_by("node__hostname", "index"))
    points: dict[int, list[Point]] = {g.pk: [] for g in gpus}
    rows = (Sample.objects.filter(gpu_id__in=points, window_start__lt=end,
                                  window_end__gt=job.started_at)
            .order_by("gpu_id", "window_start")
            .values_list("gpu_id", "window_start", "window_end", "util_gpu_avg", "util_gpu_max",
                         "memory_used_bytes_max", "energy_j"))
    for gpu_id, start, stop, util, util_max, memory, energy in rows:
        points[gpu_id].append(Point(start, stop, None if util is None else float(util),
                                    None if util_max is None else float(util_max),
                                    memory, energy))
    series = [GpuSeries(_gpu_key(g), g.memory_total_bytes or (
        g.parent.memory_total_bytes if g.parent else None), points[g.pk]) for g in gpus]
    return series, gpus


def _class_at(gpu: Gpu, at: datetime) -> int:
    interval = (GpuClassInterval.objects.filter(gpu=gpu, valid_from__lte=at)
                .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=at))
                .values_list("gpu_class_id", flat=True).first())
    return interval or gpu.gpu_class_id


def job_cost(*, gpus: list[Gpu], start: datetime, end: datetime) -> tuple[Fraction | None, str]:
    """The exact on-demand price of holding `gpus` over [start, end), and its currency; None
    when a GPU's class has no card for part of that time (the report says "no rate")."""
    total, currency = Fraction(0), ""
    for gpu in gpus:
        priced = 0
        cards = (RateCard.objects.filter(gpu_class_id=_class_at(gpu, start), valid_from__lt=end)
                 .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=start)))
        for card in cards:
            seconds = int((min(end, card.valid_until or end) - max(start, card.valid_from))
                          .total_seconds())
            total += Fraction(seconds) * Fraction(card.on_demand_rate) / 3600
            priced += seconds
            currency = card.currency
        if priced < int((end - start).total_seconds()):
            return None, ""
    return total, currency


def job_report(*, job: Job, now: datetime) -> JobReport:
    """The report of `job` as its samples show it now (a running job: up to now)."""
    end = job.ended_at or now
    series, gpus = job_series(job=job, end=end)
    facts = JobFacts(start=job.started_at, end=end, time_limit_s=job.time_limit_s,
                     interactive=job.interactive)
    analysis = analyse(facts=facts, gpus_held=max(job.gpus_held, len(gpus)), series=series,
                       thresholds=conf.thresholds())
    cost, currency = job_cost(gpus=gpus, start=job.started_at, end=end)
    return JobReport(job=job, end=end, analysis=analysis, series=series,
                     classes={_gpu_key(g): g.gpu_class.name for g in gpus},
                     cost_exact=cost, currency=currency)


def utilization_chart_points(series: GpuSeries, *, start: datetime, end: datetime,
                             buckets: int = CHART_BUCKETS) -> list[tuple[datetime, float | None]]:
    """The GPU's mean utilization in `buckets` equal slices of [start, end) (None: no
    sample), for the page's chart."""
    span = max(1, int((end - start).total_seconds()))
    sums = [[0.0, 0] for _ in range(buckets)]
    for p in series.points:
        if p.util_pct is None:
            continue
        middle = p.start + (p.end - p.start) / 2
        index = int((middle - start).total_seconds() * buckets // span)
        if 0 <= index < buckets:
            seconds = max(1, int((p.end - p.start).total_seconds()))
            sums[index][0] += p.util_pct * seconds
            sums[index][1] += seconds
    step = (end - start) / buckets
    return [(start + step * i, (total / seconds) if seconds else None)
            for i, (total, seconds) in enumerate(sums)]
