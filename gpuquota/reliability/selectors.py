"""Reliability figures per GPU, node, class and cluster (docs/reliability.md): failures
per 1,000 GPU-days with the exact Poisson interval, mean time between failures and to
repair, availability, failures by component and by action, the Slurm jobs failures ended
and their GPU-hours. A failure is a hardware
incident of the taxonomy's critical severity; application XIDs never count."""

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuquota.reliability.history import DAY_S, GpuLife, History, fleet_history
from gpuquota.reliability.stats import poisson_ci

GROUPS = ("gpu", "node", "class", "cluster")


@dataclass
class Figures:
    key: str
    gpus: int = 0
    gpu_days: float = 0.0
    failures: int = 0
    warnings: int = 0
    failed_s: float = 0.0
    jobs_killed: int = 0
    gpu_hours_lost: float = 0.0
    repairs_s: list = field(default_factory=list)
    by_component: Counter = field(default_factory=Counter)
    by_action: Counter = field(default_factory=Counter)

    @property
    def rate_per_1000(self) -> float | None:
        return 1000 * self.failures / self.gpu_days if self.gpu_days else None

    @property
    def rate_ci(self) -> tuple[float, float] | None:
        if not self.gpu_days:
            return None
        low, high = poisson_ci(self.failures)
        return 1000 * low / self.gpu_days, 1000 * high / self.gpu_days

    @property
    def mtbf_days(self) -> float | None:
        """GPU-days in service per failure (one GPU's mean time between failures)."""
        return self.gpu_days / self.failures if self.failures else None

    @property
    def mttr_hours(self) -> float | None:
        return sum(self.repairs_s) / len(self.repairs_s) / 3600 if self.repairs_s else None

    @property
    def availability(self) -> float | None:
        service_s = self.gpu_days * DAY_S
        return max(0.0, 1 - self.failed_s / service_s) if service_s else None

    def as_dict(self) -> dict:
        ci = self.rate_ci
        return {"key": self.key, "gpus": self.gpus, "gpu_days": round(self.gpu_days, 2),
                "failures": self.failures, "hardware_warnings": self.warnings,
                "failures_per_1000_gpu_days": _r(self.rate_per_1000),
                "ci95_low": _r(ci[0]) if ci else None, "ci95_high": _r(ci[1]) if ci else None,
                "jobs_killed": self.jobs_killed, "gpu_hours_lost": round(self.gpu_hours_lost, 2),
                "mtbf_days": _r(self.mtbf_days), "mttr_hours": _r(self.mttr_hours),
                "availability": _r(self.availability, 5),
                "by_component": dict(self.by_component), "by_action": dict(self.by_action)}


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def group_key(gpu: GpuLife, group: str) -> str:
    return {"gpu": gpu.uuid, "node": f"{gpu.cluster}/{gpu.hostname}",
            "class": gpu.gpu_class, "cluster": gpu.cluster}[group]


def figures_from(history: History, *, group: str, start: datetime) -> list[Figures]:
    """The figures of each group over [start, history.as_of)."""
    end = history.as_of
    found: dict[str, Figures] = {}

    def of(gpu: GpuLife) -> Figures:
        key = group_key(gpu, group)
        return found.setdefault(key, Figures(key))

    for gpu in history.gpus.values():
        service_s = gpu.service_s(start, end)
        if service_s <= 0:
            continue
        figures = of(gpu)
        figures.gpus += 1
        figures.gpu_days += service_s / DAY_S
    for incident in history.incidents:
        if incident.at < start or incident.gpu_id not in history.gpus:
            continue
        figures = of(history.gpus[incident.gpu_id])
        if incident.is_failure:
            figures.failures += 1
            figures.by_component[incident.entry.component.value] += 1
            figures.by_action[incident.entry.action.value] += 1
        else:
            figures.warnings += 1
    for job in history.killed:
        if job.ended_at >= start and job.gpu_id in history.gpus:
            figures = of(history.gpus[job.gpu_id])
            figures.jobs_killed += 1
            figures.gpu_hours_lost += job.gpu_hours
    for failed in history.failed:
        gpu = history.gpus.get(failed.gpu_id)
        if gpu is None:
            continue
        lo, hi = max(start, failed.start), min(end, failed.end or end)
        figures = of(gpu)
        figures.failed_s += max(0.0, (hi - lo).total_seconds())
        if failed.end is not None and failed.start >= start:
            figures.repairs_s.append((failed.end - failed.start).total_seconds())
    return sorted(found.values(), key=lambda f: f.key)


def reliability_figures(*, as_of: datetime, group: str, days: int = 90) -> list[dict]:
    """Each group's figures over the `days` before `as_of` (group: gpu, node, class,
    cluster), from what was recorded by then."""
    start = as_of - timedelta(days=days)
    history = fleet_history(as_of=as_of, since=start)
    return [f.as_dict() for f in figures_from(history, group=group, start=start)]


def failures_by(history: History, *, start: datetime) -> dict[str, Counter]:
    """Failures since `start` by component and by action, over the whole fleet."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for incident in history.failures():
        if incident.at >= start:
            counts["component"][incident.entry.component.value] += 1
            counts["action"][incident.entry.action.value] += 1
    return counts
