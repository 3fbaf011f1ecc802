"""The fleet's failure history as of an instant, in memory: the GPUs in service, their
hardware incidents (events of the taxonomy's hardware entries, those of one GPU within
`INCIDENT_GAP` of each other one incident) and their failed time. Only what was recorded
at or before `as_of` is read, so any past instant can be replayed. Application XIDs never
enter: the taxonomy keeps them out of `HARDWARE_XIDS`."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Q

from gpuquota.ingest.models import EventType, GpuEvent
from gpuquota.ingest.taxonomy import (
    HARDWARE_EVENT_TYPES,
    HARDWARE_XIDS,
    Entry,
    Severity,
    classify,
)
from gpuquota.inventory.models import Gpu, GpuHealthInterval
from gpuquota.reliability.jobruns import JobRun, KilledJob, job_runs, killed_jobs
from gpuquota.reliability.podruns import pod_runs, pods_killed

INCIDENT_GAP = timedelta(minutes=10)
DAY_S = 86400.0


@dataclass
class Incident:
    gpu_id: int
    node_id: int
    at: datetime
    entry: Entry  # the most severe event of the incident
    events: list = field(default_factory=list)  # (ts, label)

    @property
    def is_failure(self) -> bool:
        return self.entry.severity == Severity.CRITICAL

    @property
    def label(self) -> str:
        return f"xid {self.entry.xid}" if self.entry.xid is not None else self.events[0][1]


@dataclass
class GpuLife:
    id: int
    uuid: str
    node_id: int
    hostname: str
    cluster: str
    gpu_class: str
    commissioned_at: datetime
    retired_at: datetime | None

    def service_s(self, start: datetime, end: datetime) -> float:
        """Seconds in service within [start, end)."""
        lo = max(start, self.commissioned_at)
        hi = min(end, self.retired_at) if self.retired_at else end
        return max(0.0, (hi - lo).total_seconds())


@dataclass
class Failed:
    gpu_id: int
    start: datetime
    end: datetime | None  # None: still failed


@dataclass
class History:
    as_of: datetime
    gpus: dict[int, GpuLife]
    incidents: list[Incident]  # in time order
    failed: list[Failed]
    killed: list[KilledJob] = field(default_factory=list)
    runs: list[JobRun] = field(default_factory=list)  # the Slurm jobs and pods on its GPUs
    units: dict = field(default_factory=dict)  # the lemon test's units by kind, once built

    def failures(self) -> list[Incident]:
        return [i for i in self.incidents if i.is_failure]


def _rank(entry: Entry) -> int:
    return {Severity.CRITICAL: 2, Severity.WARNING: 1}.get(entry.severity, 0)


def _incidents(rows: list[dict], gpus: dict[int, GpuLife]) -> list[Incident]:
    by_gpu: dict[int, list] = defaultdict(list)
    for row in rows:
        gpu_id = row["gpu__parent_id"] or row["gpu_id"]
        if gpu_id in gpus:
            by_gpu[gpu_id].append(row)
    found = []
    for gpu_id, events in by_gpu.items():
        current = None
        for row in sorted(events, key=lambda r: r["ts"]):
            entry = classify(type=row["type"], xid=row["xid"])
            label = f"xid {row['xid']}" if row["type"] == EventType.XID else row["type"]
            if current is not None and row["ts"] - current.events[-1][0] <= INCIDENT_GAP:
                current.events.append((row["ts"], label))
                if _rank(entry) > _rank(current.entry):
                    current.entry = entry
                continue
            current = Incident(gpu_id, gpus[gpu_id].node_id, row["ts"], entry, [(row["ts"], label)])
            found.append(current)
    return sorted(found, key=lambda i: (i.at, i.gpu_id))


HARDWARE = Q(type__in=HARDWARE_EVENT_TYPES) | Q(type=EventType.XID, xid__in=HARDWARE_XIDS)


def gpus_incidents(*, gpus: dict[int, GpuLife], since: datetime,
                   as_of: datetime) -> list[Incident]:
    """The hardware incidents of a few `gpus` (and their MIG devices) in [since, as_of]."""
    events = GpuEvent.objects.filter(HARDWARE, Q(gpu_id__in=gpus) | Q(gpu__parent_id__in=gpus),
                                     ts__gte=since, ts__lte=as_of)
    return _incidents(list(events.values("gpu_id", "gpu__parent_id", "ts", "type", "xid")), gpus)


def fleet_history(*, as_of: datetime, since: datetime | None = None,
                  gpu_class_ids: set[int] | None = None) -> History:
    """The GPUs commissioned by `as_of` (of `gpu_class_ids` only, when given: a GPU's or
    node's page reads its classes, not the fleet), their hardware incidents and failed
    intervals starting in [since, as_of] (since: all history)."""
    physical = Gpu.objects.filter(parent__isnull=True, commissioned_at__lte=as_of)
    if gpu_class_ids is not None:
        physical = physical.filter(gpu_class_id__in=gpu_class_ids)
    gpus = {
        row["id"]: GpuLife(row["id"], row["uuid"], row["node_id"], row["node__hostname"],
                           row["node__cluster__slug"], row["gpu_class__name"],
                           row["commissioned_at"], row["retired_at"])
        for row in physical.values(
            "id", "uuid", "node_id", "node__hostname", "node__cluster__slug",
            "gpu_class__name", "commissioned_at", "retired_at")
    }
    events = GpuEvent.objects.filter(HARDWARE, gpu__isnull=False, ts__lte=as_of)
    intervals = GpuHealthInterval.objects.filter(
        state=GpuHealthInterval.State.FAILED, valid_from__lte=as_of)
    if gpu_class_ids is not None:
        ids = physical.values("id")
        events = events.filter(Q(gpu_id__in=ids) | Q(gpu__parent_id__in=ids))
        intervals = intervals.filter(gpu_id__in=ids)
    if since is not None:
        events = events.filter(ts__gte=since)
        intervals = intervals.filter(Q(valid_until__isnull=True) | Q(valid_until__gt=since))
    rows = list(events.values("gpu_id", "gpu__parent_id", "ts", "type", "xid"))
    failed = [Failed(gpu_id, start, end if end is None or end <= as_of else None)
              for gpu_id, start, end in intervals.values_list("gpu_id", "valid_from",
                                                              "valid_until")]
    incidents = _incidents(rows, gpus)
    runs = job_runs(gpus, since=since, as_of=as_of)
    pods = pods_killed(gpus, since=since, as_of=as_of)
    killed = killed_jobs(runs, failures_s(incidents), gap_s=INCIDENT_GAP.total_seconds())
    return History(as_of, gpus, incidents, failed, killed + pods.killed,
                   runs + pods.runs + pod_runs(gpus, since=since, as_of=as_of,
                                               killed=pods.ends))


def failures_s(incidents: list[Incident]) -> dict[int, list]:
    """Each GPU's hardware failure instants, in seconds since the epoch."""
    found: dict[int, list] = defaultdict(list)
    for incident in incidents:
        if incident.is_failure:
            found[incident.gpu_id].append(incident.at.timestamp())
    return found
