"""A job's report (docs/jobs.md): the samples of the GPUs it held while it ran, judged by
`analysis.analyse`, and priced at the on-demand rate of the rate cards in force, exactly:
Σ seconds × rate / 3600 as a fraction, rounded once, half up, to the cent."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from functools import reduce
from operator import or_

from django.db.models import Q

from gpuquota.ingest.models import Sample
from gpuquota.inventory.models import Gpu, GpuClassInterval
from gpuquota.jobs import conf
from gpuquota.jobs.analysis import Analysis, GpuSeries, JobFacts, Point, analyse
from gpuquota.jobs.models import Job, JobGpu
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


def _float(value) -> float | None:
    return None if value is None else float(value)


def _gpu_key(gpu: Gpu) -> str:
    return f"{gpu.node.hostname}/{gpu.index if gpu.index is not None else gpu.uuid[:12]}"


def jobs_series(*, jobs: list[Job], end: datetime, ends: dict[int, datetime] | None = None
                ) -> dict[int, tuple[list[GpuSeries], list[Gpu]]]:
    """`job_series` of many jobs up to `end` (or each up to its own in `ends`, by pk), in two
    queries whatever their number (each GPU's samples read from the start of the earliest of
    these jobs that held it): by job pk."""
    ends = {job.pk: (ends or {}).get(job.pk, end) for job in jobs}
    end = max(ends.values(), default=end)
    held: dict[int, list[Gpu]] = {job.pk: [] for job in jobs}
    rows = JobGpu.objects.filter(job__in=list(held)).select_related(
        "gpu__node", "gpu__gpu_class", "gpu__parent") if held else ()
    for row in rows:
        held[row.job_id].append(row.gpu)
    first: dict[int, datetime] = {}  # GPU pk -> the earliest start of a job that held it
    for job in jobs:
        for gpu in held[job.pk]:
            first[gpu.pk] = min(first.get(gpu.pk, job.started_at), job.started_at)
    by_start: dict[datetime, list[int]] = {}
    for gpu_pk, start in first.items():
        by_start.setdefault(start, []).append(gpu_pk)
    points: dict[int, list[Point]] = {pk: [] for pk in first}
    rows = (Sample.objects.filter(window_start__lt=end)
            .filter(reduce(or_, (Q(gpu_id__in=pks, window_end__gt=start)
                                 for start, pks in by_start.items())))
            .order_by("gpu_id", "window_start")
            .values_list("gpu_id", "window_start", "window_end", "util_gpu_avg", "util_gpu_max",
                         "memory_used_bytes_max", "energy_j", "sm_active_avg",
                         "sm_occupancy_avg", "tensor_active_avg", "dram_active_avg")
            ) if points else ()
    for gpu_id, begin, stop, util, util_max, memory, energy, *profiling in rows:
        points[gpu_id].append(Point(begin, stop, _float(util), _float(util_max), memory, energy,
                                    *(_float(v) for v in profiling)))
    found = {}
    for job in jobs:
        mine = sorted({g.pk: g for g in held[job.pk]}.values(),
                      key=lambda g: (g.node.hostname, g.index is None, g.index or 0))
        series = [GpuSeries(_gpu_key(g), g.memory_total_bytes or (
            g.parent.memory_total_bytes if g.parent else None),
            [p for p in points[g.pk] if p.end > job.started_at and p.start < ends[job.pk]])
            for g in mine]
        found[job.pk] = (series, mine)
    return found


def job_series(*, job: Job, end: datetime) -> tuple[list[GpuSeries], list[Gpu]]:
    """The samples of each GPU the job held over [start, end), oldest first."""
    return jobs_series(jobs=[job], end=end)[job.pk]


class Prices:
    """The class intervals of some GPUs and the rate cards of their classes, read once (two
    queries) to price many jobs."""

    def __init__(self, gpus: list[Gpu]):
        self._classes: dict[int, list[tuple]] = {}
        for gpu_id, class_id, valid_from, valid_until in GpuClassInterval.objects.filter(
                gpu_id__in={g.pk for g in gpus}).values_list(
                "gpu_id", "gpu_class_id", "valid_from", "valid_until"):
            self._classes.setdefault(gpu_id, []).append((valid_from, valid_until, class_id))
        classes = {g.gpu_class_id for g in gpus} | {
            c for rows in self._classes.values() for *_, c in rows}
        self._cards: dict[int, list[RateCard]] = {}
        for card in (RateCard.objects.filter(gpu_class_id__in=classes)
                     .order_by("gpu_class__name", "valid_from", "pk")) if classes else ():
            self._cards.setdefault(card.gpu_class_id, []).append(card)

    def class_at(self, gpu: Gpu, at: datetime) -> int:
        """The class the GPU was priced as at `at` (its current one where no interval says)."""
        for valid_from, valid_until, class_id in self._classes.get(gpu.pk, ()):
            if valid_from <= at and (valid_until is None or valid_until > at):
                return class_id
        return gpu.gpu_class_id

    def cards(self, class_id: int, start: datetime, end: datetime) -> list[RateCard]:
        """The class's cards in force over part of [start, end)."""
        return [c for c in self._cards.get(class_id, ())
                if c.valid_from < end and (c.valid_until is None or c.valid_until > start)]


def job_cost(*, gpus: list[Gpu], start: datetime, end: datetime,
             prices: Prices | None = None) -> tuple[Fraction | None, str]:
    """The exact on-demand price of holding `gpus` over [start, end), and its currency; None
    when a GPU's class has no card for part of that time (the report says "no rate")."""
    prices = prices or Prices(gpus)
    total, currency = Fraction(0), ""
    for gpu in gpus:
        priced = 0
        for card in prices.cards(prices.class_at(gpu, start), start, end):
            seconds = int((min(end, card.valid_until or end) - max(start, card.valid_from))
                          .total_seconds())
            total += Fraction(seconds) * Fraction(card.on_demand_rate) / 3600
            priced += seconds
            currency = card.currency
        if priced < int((end - start).total_seconds()):
            return None, ""
    return total, currency


def job_report(*, job: Job, now: datetime,
               series_gpus: tuple[list[GpuSeries], list[Gpu]] | None = None,
               prices: Prices | None = None) -> JobReport:
    """The report of `job` as its samples show it now (a running job: up to now);
    `series_gpus` and `prices`, read for many jobs at once (`jobs_series`, `Prices`), spare
    its reads."""
    end = job.ended_at or now
    series, gpus = series_gpus or job_series(job=job, end=end)
    facts = JobFacts(start=job.started_at, end=end, time_limit_s=job.time_limit_s,
                     interactive=job.interactive)
    analysis = analyse(facts=facts, gpus_held=max(job.gpus_held, len(gpus)), series=series,
                       thresholds=conf.thresholds())
    cost, currency = job_cost(gpus=gpus, start=job.started_at, end=end, prices=prices)
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
