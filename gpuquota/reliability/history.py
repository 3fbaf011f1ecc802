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


def fleet_history(*, as_of: datetime, since: datetime | None = None) -> History:
    """The GPUs commissioned by `as_of`, their hardware incidents and failed intervals
    starting in [since, as_of] (since: all history)."""
    gpus = {
        row["id"]: GpuLife(row["id"], row["uuid"], row["node_id"], row["node__hostname"],
                           row["node__cluster__slug"], row["gpu_class__name"],
                           row["commissioned_at"], row["retired_at"])
        for row in Gpu.objects.filter(parent__isnull=True, commissioned_at__lte=as_of).values(
            "id", "uuid", "node_id", "node__hostname", "node__cluster__slug",
            "gpu_class__name", "commissioned_at", "retired_at")
    }
    hardware = (Q(type__in=HARDWARE_EVENT_TYPES)
                | Q(type=EventType.XID, xid__in=HARDWARE_XIDS))
    events = GpuEvent.objects.filter(hardware, gpu__isnull=False, ts__lte=as_of)
    intervals = GpuHealthInterval.objects.filter(
        state=GpuHealthInterval.State.FAILED, valid_from__lte=as_of)
    if since is not None:
        events = events.filter(ts__gte=since)
        intervals = intervals.filter(Q(valid_until__isnull=True) | Q(valid_until__gt=since))
    rows = list(events.values("gpu_id", "gpu__parent_id", "ts", "type", "xid"))
    failed = [Failed(gpu_id, start, end if end is None or end <= as_of else None)
              for gpu_id, start, end in intervals.values_list("gpu_id", "valid_from",
                                                              "valid_until")]
    return History(as_of, gpus, _incidents(rows, gpus), failed)
