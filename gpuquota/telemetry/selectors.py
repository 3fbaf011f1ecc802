"""Reads of the telemetry importer: each source's freshness, problems and what it reports."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from gpuquota.telemetry.models import SourceGpu, TelemetrySource


@dataclass
class SourceStatus:
    """A source with its import lag (now - cursor), its nodes and the utilization metrics
    its GPUs are read from."""

    source: TelemetrySource
    lag_s: int | None
    failing: bool
    nodes: list[str] = field(default_factory=list)
    gpus: int = 0
    util_metrics: dict[str, int] = field(default_factory=dict)


def sources_status(*, now: datetime) -> list[SourceStatus]:
    """Every source, in name order; two queries."""
    sources = list(TelemetrySource.objects.select_related("cluster"))
    nodes: dict[int, set] = defaultdict(set)
    metrics: dict[int, dict] = defaultdict(lambda: defaultdict(int))
    gpus: dict[int, int] = defaultdict(int)
    for source_id, hostname, metric in SourceGpu.objects.values_list(
            "source_id", "gpu__node__hostname", "util_metric"):
        nodes[source_id].add(hostname)
        metrics[source_id][metric] += 1
        gpus[source_id] += 1
    return [SourceStatus(
        source=s, lag_s=int((now - s.cursor).total_seconds()) if s.cursor else None,
        failing=bool(s.last_error), nodes=sorted(nodes[s.pk]), gpus=gpus[s.pk],
        util_metrics=dict(metrics[s.pk])) for s in sources]


def failing_sources() -> list[TelemetrySource]:
    """Enabled sources whose last pull failed."""
    return list(TelemetrySource.objects.filter(enabled=True).exclude(last_error=""))
