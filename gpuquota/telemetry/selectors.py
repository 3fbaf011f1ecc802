"""Reads of the telemetry importer: each source's freshness, problems and what it reports."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from gpuquota.telemetry.fields import ECC_DBE, PROF_UTIL, REMAP_PENDING, UNC_REMAPPED, XID
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
    limits: list[str] = field(default_factory=list)


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
        util_metrics=dict(metrics[s.pk]), limits=source_limits(observed=s.observed))
        for s in sources]


def failing_sources() -> list[TelemetrySource]:
    """Enabled sources whose last pull failed."""
    return list(TelemetrySource.objects.filter(enabled=True).exclude(last_error=""))


def source_limits(*, observed: dict) -> list[str]:
    """What a source's variant of dcgm-exporter cannot carry, from what its series showed
    (docs/telemetry.md, "What an exporter variant cannot carry")."""
    if not observed.get("metrics"):
        return []
    metrics = set(observed["metrics"])
    limits = []
    if PROF_UTIL not in metrics:
        limits.append("No profiling fields (DCGM_FI_PROF_GR_ENGINE_ACTIVE): utilization is "
                      "kernel-active time" + ("; its MIG GPUs have no utilization (no data)"
                                              if observed.get("mig") else "") + ".")
    if observed.get("kubernetes") and not observed.get("shared_pods"):
        limits.append("One pod per GPU: a GPU that pods share (time-slicing) is billed to one "
                      "of them; dcgm-exporter --kubernetes-virtual-gpus names each.")
    if not observed.get("kubernetes") and not observed.get("hpc_job"):
        limits.append("No pod or hpc_job labels: busy time outside reservations is "
                      "unattributed.")
    if observed.get("unknown_jobs"):
        limits.append(f"{observed['unknown_jobs']} process record(s) named a Slurm job the "
                      "accounting import does not know: unattributed.")
    if XID not in metrics:
        limits.append("No DCGM_FI_DEV_XID_ERRORS: a failure is seen only when a GPU vanishes.")
    if ECC_DBE not in metrics:
        limits.append("No ECC volatile counters: an uncorrectable ECC error fails a GPU only "
                      "through its XID.")
    if REMAP_PENDING not in metrics and UNC_REMAPPED not in metrics:
        limits.append("No row-remap fields: a pending remap degrades nothing.")
    return limits
