"""Tier two of agent-protocol.md: each record judged on its own.

A record that cannot be placed (GPU, window, pid...) is rejected; a nullable
value out of range is nulled. The functions turn structurally valid records
into rows in the column order of `storage.COLUMNS`, listing what they did not take.
"""

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from gpuquota.ingest import conf
from gpuquota.ingest.models import EventType
from gpuquota.ingest.parsing import instant_parse, uuid_normal, uuid_parse

INT32 = 2**31 - 1
INT64 = 2**63 - 1
MAX_PID = 4194304
MAX_STRING = 256
PERCENT_SLACK = 0.01
NODE_EVENT_TYPES = frozenset({"nvml_unavailable", "agent_restart", "data_dropped", "clock_skew"})
EVENT_TYPES = frozenset(EventType.values)
UNKNOWN_GPU = "unknown GPU: not listed in gpus nor known for this node"
JOB_SOURCES = frozenset({"slurm", "kubernetes", "docker", "unix"})
PROFILING = ("sm_active_avg", "sm_occupancy_avg", "tensor_active_avg", "dram_active_avg")


@dataclass(frozen=True)
class GpuRef:
    """A GPU this node may write, with what its checks need."""

    id: int
    physical_id: int
    memory_total_bytes: int | None
    power_limit_w: float | None


@dataclass
class Outcome:
    """What a batch's records became: rows to store and what was not taken."""

    samples: list[tuple] = field(default_factory=list)
    processes: list[tuple] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)
    nulled: list[dict] = field(default_factory=list)

    def reject(self, path: str, why: str) -> None:
        self.rejected.append({"path": path, "why": why})

    def null(self, path: str, why: str) -> None:
        self.nulled.append({"path": path, "why": why})


class Judge:
    """Record checks for one batch: the GPUs it may write and the time bounds."""

    def __init__(self, *, gpus: dict, now: datetime, check_age: bool = True,
                 boot_pk: int | None = None, receipt_pk: int | None = None):
        # gpus: normalised uuid -> GpuRef, or a string saying why records for it are rejected.
        self.gpus = gpus
        self.boot_pk = boot_pk
        self.receipt_pk = receipt_pk
        self.latest = now + timedelta(seconds=conf.MAX_FUTURE_S)
        self.earliest = now - timedelta(seconds=conf.MAX_AGE_S) if check_age else None
        self.out = Outcome()
        self._instants: dict[str, datetime | None] = {}
        self._uuids: dict[str, GpuRef | str] = {}
        self._windows: dict[tuple[str, str], tuple] = {}

    # -- helpers ----------------------------------------------------------------------------
    def instant(self, text: str) -> datetime | None:
        """A whole-second aware instant, or None when `text` is not one."""
        try:
            return self._instants[text]
        except KeyError:
            pass
        value = instant_parse(text)
        if value is not None and value.microsecond:
            value = None
        self._instants[text] = value
        return value

    def moment(self, text: str) -> datetime | None:
        """An aware instant truncated to the second (accounting.md), or None."""
        value = instant_parse(text)
        return value.replace(microsecond=0) if value is not None else None

    def gpu(self, raw: str) -> GpuRef | str:
        found = self._uuids.get(raw)
        if found is None:
            normal = uuid_normal(raw)
            if normal is None:
                found = "not an NVML GPU/MIG UUID"
            else:
                found = self.gpus.get(normal, UNKNOWN_GPU)
            self._uuids[raw] = found
        return found

    def window(self, record: dict, path: str) -> tuple[datetime, datetime, float] | None:
        """(start, end, length_s), or None with the record listed as rejected."""
        texts = (record["window_start"], record["window_end"])
        found = self._windows.get(texts)
        if found is None:
            found = self._windows[texts] = self.window_check(*texts)
        if type(found) is tuple and len(found) == 2 and type(found[0]) is str:
            self.out.reject(f"{path}.{found[0]}", found[1])
            return None
        return found

    def place(self, record: dict, path: str) -> tuple[GpuRef, tuple] | None:
        """The GPU and window of a sample or process record, or None with the record
        listed as rejected (it cannot be placed)."""
        gpu = self.gpu(record["gpu_uuid"])
        if type(gpu) is str:
            self.out.reject(f"{path}.gpu_uuid", gpu)
            return None
        window = self.window(record, path)
        return None if window is None else (gpu, window)

    def window_check(self, start_text: str, end_text: str):
        start = self.instant(start_text)
        end = self.instant(end_text)
        why = None
        if start is None:
            why = ("window_start", "not a whole-second ISO 8601 instant with a time zone")
        elif end is None:
            why = ("window_end", "not a whole-second ISO 8601 instant with a time zone")
        elif not 1 <= (length_s := (end - start).total_seconds()) <= conf.MAX_WINDOW_S:
            why = ("window_end", f"window length must be 1..{conf.MAX_WINDOW_S} s")
        elif end > self.latest:
            why = ("window_end", "more than 5 minutes after server time")
        elif self.earliest is not None and start < self.earliest:
            why = ("window_start", "more than 8 days before server time")
        if why:
            return why
        return start, end, length_s

    def percent(self, record: dict, name: str, path: str):
        value = record.get(name)
        if value is None:
            return None
        if 100 < value <= 100 + PERCENT_SLACK:
            return 100.0
        if not 0 <= value <= 100:
            self.out.null(f"{path}.{name}", "must be 0..100")
            return None
        return value

    def bounded(self, record: dict, name: str, path: str, low, high):
        value = record.get(name)
        if value is None:
            return None
        if value < low or (high is not None and value > high) or not (
                math.isfinite(value) if type(value) is float else _finite(value)):
            why = f"must be {low}..{high}" if high is not None and high < INT64 else (
                f"must be >= {low}")
            self.out.null(f"{path}.{name}", why)
            return None
        return value

    def text(self, value, path: str):
        if value is None:
            return None
        value = str(value)
        if len(value) > MAX_STRING:
            self.out.null(path, f"longer than {MAX_STRING} characters")
            return None
        if "\x00" in value:  # PostgreSQL text cannot hold it
            self.out.null(path, "contains a NUL character")
            return None
        return value

    # -- records ----------------------------------------------------------------------------
    def sample(self, index: int, record: dict, received_at: datetime) -> None:
        path = f"samples[{index}]"
        if (placed := self.place(record, path)) is None:
            return
        gpu, window = placed
        readings = record["readings"]
        if not 0 <= readings <= INT32:
            self.out.reject(f"{path}.readings", "must be >= 0")
            return
        util_avg = self.percent(record, "util_gpu_avg", path)
        util_max = self.percent(record, "util_gpu_max", path)
        if util_avg is not None and util_max is not None and _above(util_avg, util_max):
            self.out.null(f"{path}.util_gpu_avg", "util_gpu_avg above util_gpu_max")
            util_avg = None
        total = gpu.memory_total_bytes
        mem_high = total if total is not None else INT64
        mem_avg = self.bounded(record, "memory_used_bytes_avg", path, 0, mem_high)
        mem_max = self.bounded(record, "memory_used_bytes_max", path, 0, mem_high)
        if mem_avg is not None and mem_max is not None and mem_avg > mem_max:
            self.out.null(f"{path}.memory_used_bytes_avg", "memory_used_bytes_avg above max")
            mem_avg = None
        limit = gpu.power_limit_w
        power_high = 3 * limit if limit else None
        energy_high = power_high * window[2] if power_high else None
        get, bounded = record.get, self.bounded  # absent or null fields: no check to make
        self.out.samples.append((
            gpu.id, window[0], window[1], _int(readings),
            util_avg, util_max,
            None if get("util_mem_avg") is None else self.percent(record, "util_mem_avg", path),
            _int(mem_avg), _int(mem_max),
            None if get("power_w_avg") is None else bounded(record, "power_w_avg", path, 0,
                                                            power_high),
            None if get("energy_j") is None else bounded(record, "energy_j", path, 0,
                                                         energy_high),
            None if get("temp_c_max") is None else _int(bounded(record, "temp_c_max", path,
                                                                -40, 150)),
            *(None if get(name) is None else _int(bounded(record, name, path, 0, INT64))
              for name in ("clock_event_reasons", "ecc_uncorrected", "ecc_corrected")),
            *(None if get(name) is None else self.percent(record, name, path)
              for name in PROFILING),
            received_at, self.boot_pk, self.receipt_pk,
        ))

    def process(self, index: int, record: dict, received_at: datetime) -> None:
        path = f"processes[{index}]"
        if (placed := self.place(record, path)) is None:
            return
        gpu, window = placed
        if not 1 <= record["pid"] <= MAX_PID:
            self.out.reject(f"{path}.pid", f"must be 1..{MAX_PID}")
            return
        if not 0 <= record["pid_start"] <= INT64:
            self.out.reject(f"{path}.pid_start", "must be 0..2^63-1")
            return
        job = record.get("job") or {}
        source = job.get("source")
        if source is not None and source not in JOB_SOURCES:
            self.out.null(f"{path}.job.source", f"must be one of {sorted(JOB_SOURCES)}")
            source = None
        total = gpu.memory_total_bytes
        self.out.processes.append((
            gpu.id, window[0], window[1], int(record["pid"]), int(record["pid_start"]),
            _int(self.bounded(record, "uid", path, 0, INT64)),
            self.text(record.get("user"), f"{path}.user"),
            self.text(record.get("command"), f"{path}.command"),
            source,
            self.text(job.get("id"), f"{path}.job.id"),
            self.text(job.get("account"), f"{path}.job.account"),
            _int(self.bounded(record, "memory_used_bytes_max", path, 0,
                              total if total is not None else INT64)),
            self.percent(record, "util_sm_avg", path),
            received_at, self.receipt_pk,
        ))

    def event(self, index: int, record: dict, node_id: int, received_at: datetime) -> None:
        path = f"events[{index}]"
        event_id = uuid_parse(record["event_id"])
        if event_id is None:
            self.out.reject(f"{path}.event_id", "must be a UUID")
            return
        kind = record["type"]
        if kind not in EVENT_TYPES:
            self.out.reject(f"{path}.type", f"must be one of {sorted(EVENT_TYPES)}")
            return
        xid = record.get("xid")
        if kind == "xid" and xid is None:
            self.out.reject(f"{path}.xid", "required when type is xid")
            return
        if xid is not None and not -INT32 <= xid <= INT32:
            if kind == "xid":
                self.out.reject(f"{path}.xid", "out of range")
                return
            self.out.null(f"{path}.xid", "out of range")
            xid = None
        ts = self.moment(record["ts"])
        why = None
        if ts is None:
            why = "not an ISO 8601 instant with a time zone"
        elif ts > self.latest:
            why = "more than 5 minutes after server time"
        elif self.earliest is not None and ts < self.earliest:
            why = "more than 8 days before server time"
        if why:
            self.out.reject(f"{path}.ts", why)
            return
        gpu_id = None
        raw_uuid = record.get("gpu_uuid")
        if kind in NODE_EVENT_TYPES:
            if raw_uuid is not None:
                self.out.null(f"{path}.gpu_uuid", f"{kind} is a node-level event")
        elif raw_uuid is None:
            self.out.reject(f"{path}.gpu_uuid", f"required for a {kind} event")
            return
        else:
            gpu = self.gpu(raw_uuid)
            if type(gpu) is str:
                self.out.reject(f"{path}.gpu_uuid", gpu)
                return
            gpu_id = gpu.id
        self.out.events.append((
            event_id, node_id, gpu_id, ts, kind, _int(xid),
            self.text(record.get("detail"), f"{path}.detail"), received_at, self.boot_pk,
        ))


def _above(avg: float, max_: float) -> bool:
    """`avg > max + 0.01`, in the decimals the agent sent (floats would drift: 2.01 + 0.01).
    The shortest decimals keep the floats' order, so avg <= max needs no decimals."""
    if avg <= max_:
        return False
    return Decimal(repr(avg)) > Decimal(repr(max_)) + _SLACK


_SLACK = Decimal(repr(PERCENT_SLACK))


def _finite(value) -> bool:
    """A number a float column can hold (JSON's 1e400 reads as infinity)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _int(value):
    return value if value is None or type(value) is int else int(value)
