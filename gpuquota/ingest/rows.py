"""Records built in-process from typed data (the telemetry importer), judged by the agent's
rules (`records.Judge`) without a JSON form to check and parse back.

A sample is a tuple in `SAMPLE_FIELDS` order and a process record a `ProcessRow`, window
bounds in epoch seconds. They are trusted for their types (the structural tier of
agent-protocol.md is for bodies from outside), never for their values: a record whose every
value is plainly in range becomes its row at once; any other goes, as its protocol record,
through the very checks an agent's does, so what is stored, nulled or rejected is the same.
"""

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import groupby
from operator import itemgetter

from gpuquota.ingest import conf
from gpuquota.ingest.columns import FLOATS, INTS, column_plain, ordered
from gpuquota.ingest.parsing import instant_text
from gpuquota.ingest.records import (
    INT32,
    INT64,
    JOB_SOURCES,
    MAX_PID,
    MAX_STRING,
    PROFILING,
    GpuRef,
    Judge,
)

SAMPLE_FIELDS = ("gpu_uuid", "window_start", "window_end", "readings", "util_gpu_avg",
                 "util_gpu_max", "memory_used_bytes_avg", "memory_used_bytes_max",
                 "power_w_avg", "energy_j", "temp_c_max", "ecc_uncorrected", "ecc_corrected",
                 *PROFILING)


@dataclass(slots=True)
class ProcessRow:
    """A process record; `user` and `job_account` may be filled in after it is built (the
    Slurm accounting's owners)."""

    gpu_uuid: str
    window_start: int
    window_end: int
    pid: int
    pid_start: int
    command: str | None
    job_source: str | None
    job_id: str | None
    job_account: str | None
    memory_used_bytes_max: int | None
    user: str | None = None


@dataclass
class Rows:
    """A batch's sample and process records as rows (its events stay protocol records)."""

    samples: list = field(default_factory=list)
    processes: list = field(default_factory=list)

    def gpu_uuids(self) -> set[str]:
        return {row[0] for row in self.samples} | {row.gpu_uuid for row in self.processes}

    def window_starts(self) -> set[int]:
        return {row[1] for row in self.samples} | {row.window_start for row in self.processes}


def sample_record(row: tuple) -> dict:
    """The agent protocol's sample record of a row."""
    record = dict(zip(SAMPLE_FIELDS, row, strict=True))
    record["window_start"] = instant_text(row[1])
    record["window_end"] = instant_text(row[2])
    return record


def process_record(row: ProcessRow) -> dict:
    """The agent protocol's process record of a row."""
    record = {"gpu_uuid": row.gpu_uuid, "window_start": instant_text(row.window_start),
              "window_end": instant_text(row.window_end), "pid": row.pid,
              "pid_start": row.pid_start, "command": row.command,
              "job": {"source": row.job_source, "id": row.job_id},
              "memory_used_bytes_max": row.memory_used_bytes_max}
    if row.job_account is not None:
        record["job"]["account"] = row.job_account
    if row.user is not None:
        record["user"] = row.user
    return record


def rows_days(rows: Rows, *, now: datetime, check_age: bool) -> set:
    """The UTC days of the rows' windows that may be stored (`batches._days`' rule)."""
    latest = now + timedelta(seconds=conf.MAX_FUTURE_S)
    earliest = now - timedelta(seconds=conf.MAX_AGE_S + conf.MAX_WINDOW_S) if check_age else None
    days = set()
    for start in rows.window_starts():
        instant = datetime.fromtimestamp(start, UTC)
        if instant > latest or (earliest and instant < earliest):
            continue
        days.add(instant.date())
    return days


class _Windows(dict):
    """The judge's window check once per pair of bounds (epoch seconds)."""

    def __init__(self, judge: Judge):
        super().__init__()
        self.judge = judge

    def __missing__(self, bounds: tuple[int, int]) -> tuple:
        found = self[bounds] = self.judge.window_check(instant_text(bounds[0]),
                                                       instant_text(bounds[1]))
        return found


def _count_plain(value, high: int) -> bool:
    return value is None or (type(value) is int and 0 <= value <= high)


def _real_plain(value, high: float | None) -> bool:
    return value is None or (type(value) is float and math.isfinite(value) and 0 <= value
                             and (high is None or value <= high))


def _sample_plain(row: tuple, gpu: GpuRef, length_s: float) -> bool:
    """Whether the judge would take every value of the sample as it is (nothing nulled,
    clamped or rejected): then its row is the judge's without asking it. Spelt out
    inline: it runs for every sample."""
    (_, _, _, readings, util_avg, util_max, mem_avg, mem_max, power, energy, temp,
     ecc_uncorrected, ecc_corrected, sm_active, sm_occupancy, tensor_active, dram_active) = row
    if type(readings) is not int or not 0 <= readings <= INT32:
        return False
    if util_avg is not None and (type(util_avg) is not float or not 0 <= util_avg <= 100):
        return False
    if util_max is not None and (type(util_max) is not float or not 0 <= util_max <= 100):
        return False
    if util_avg is not None and util_max is not None and util_avg > util_max:
        return False
    memory_high = gpu.memory_total_bytes if gpu.memory_total_bytes is not None else INT64
    if mem_avg is not None and (type(mem_avg) is not int or not 0 <= mem_avg <= memory_high):
        return False
    if mem_max is not None and (type(mem_max) is not int or not 0 <= mem_max <= memory_high):
        return False
    if mem_avg is not None and mem_max is not None and mem_avg > mem_max:
        return False
    if power is not None or energy is not None:
        if gpu.power_limit_w:
            power_high = 3 * gpu.power_limit_w
            if not (_real_plain(power, power_high)
                    and _real_plain(energy, power_high * length_s)):
                return False
        elif not ((power is None or (type(power) is float and 0 <= power < math.inf))
                  and (energy is None or (type(energy) is float and 0 <= energy < math.inf))):
            return False  # no limit known (the importer's GPUs): in range and finite
    if temp is not None and (type(temp) is not int or not -40 <= temp <= 150):
        return False
    for percent in (sm_active, sm_occupancy, tensor_active, dram_active):
        if percent is not None and (type(percent) is not float or not 0 <= percent <= 100):
            return False
    return (ecc_uncorrected is None and ecc_corrected is None) or (
        _count_plain(ecc_uncorrected, INT64) and _count_plain(ecc_corrected, INT64))


def _run_plain(rows: list, gpu: GpuRef) -> bool:
    """`_sample_plain` of every row of one GPU at once (a GPU whose power limit is not
    known, as the importer's are; with one, energy's bound depends on each window)."""
    (_, _, _, readings, util_avg, util_max, mem_avg, mem_max, power, energy, temp,
     ecc_uncorrected, ecc_corrected, sm_active, sm_occupancy, tensor_active,
     dram_active) = zip(*rows, strict=True)
    memory_high = gpu.memory_total_bytes if gpu.memory_total_bytes is not None else INT64
    return (column_plain(readings, INTS, 0, INT32, nullable=False)
            and column_plain(util_avg, FLOATS, 0, 100) and column_plain(util_max, FLOATS, 0, 100)
            and ordered(util_avg, util_max)
            and column_plain(mem_avg, INTS, 0, memory_high)
            and column_plain(mem_max, INTS, 0, memory_high) and ordered(mem_avg, mem_max)
            and column_plain(power, FLOATS, 0, math.inf) and math.inf not in power
            and column_plain(energy, FLOATS, 0, math.inf) and math.inf not in energy
            and column_plain(temp, INTS, -40, 150)
            and column_plain(ecc_uncorrected, INTS, 0, INT64)
            and column_plain(ecc_corrected, INTS, 0, INT64)
            and column_plain(sm_active, FLOATS, 0, 100)
            and column_plain(sm_occupancy, FLOATS, 0, 100)
            and column_plain(tensor_active, FLOATS, 0, 100)
            and column_plain(dram_active, FLOATS, 0, 100))


def _text_plain(value) -> bool:
    return value is None or (type(value) is str and len(value) <= MAX_STRING
                             and "\x00" not in value)


def _texts_plain(user, command, job_source, job_id, job_account) -> bool:
    return ((job_source is None or job_source in JOB_SOURCES) and _text_plain(user)
            and _text_plain(command) and _text_plain(job_id) and _text_plain(job_account))


def _process_plain(row: ProcessRow, gpu: GpuRef) -> bool:
    """Whether the judge would take the process record's numbers as they are (its texts:
    `_texts_plain`)."""
    memory_high = gpu.memory_total_bytes if gpu.memory_total_bytes is not None else INT64
    return (type(row.pid) is int and 1 <= row.pid <= MAX_PID
            and type(row.pid_start) is int and 0 <= row.pid_start <= INT64
            and _count_plain(row.memory_used_bytes_max, memory_high))


def rows_judge(*, body: dict, rows: Rows, judge: Judge, node_id: int, now: datetime):
    """The judge's outcome for a body whose samples and processes are `rows` (its events,
    few, are protocol records): a plain row is taken as it is (`_sample_plain`,
    `_process_plain`), any other judged as its protocol record."""
    if body.get("samples") or body.get("processes"):
        raise ValueError("a batch's samples and processes are records or rows, not both")
    windows, gpus, out = _Windows(judge), {}, judge.out
    boot_pk, receipt_pk = judge.boot_pk, judge.receipt_pk
    index = 0
    for gpu_uuid, run in groupby(rows.samples, key=itemgetter(0)):  # a GPU's rows at once
        run = list(run)
        gpu = gpus.get(gpu_uuid) or gpus.setdefault(gpu_uuid, judge.gpu(gpu_uuid))
        plain = type(gpu) is GpuRef and not gpu.power_limit_w and _run_plain(run, gpu)
        for row in run:
            window = windows[row[1], row[2]]
            if len(window) == 3 and (plain or (
                    type(gpu) is GpuRef and _sample_plain(row, gpu, window[2]))):
                out.samples.append((
                    gpu.id, window[0], window[1], *row[3:6], None, *row[6:11], None,
                    *row[11:], now, boot_pk, receipt_pk))  # util_mem_avg, clock reasons: none
            else:
                judge.sample(index, sample_record(row), now)
            index += 1
    texts: dict[tuple, bool] = {}  # a series' texts repeat in every window: checked once
    for index, row in enumerate(rows.processes):
        gpu = gpus.get(row.gpu_uuid) or gpus.setdefault(row.gpu_uuid, judge.gpu(row.gpu_uuid))
        window = windows[row.window_start, row.window_end]
        named = (row.user, row.command, row.job_source, row.job_id, row.job_account)
        plain = texts.get(named)
        if plain is None:
            plain = texts[named] = _texts_plain(*named)
        if type(gpu) is GpuRef and len(window) == 3 and plain and _process_plain(row, gpu):
            out.processes.append((
                gpu.id, window[0], window[1], row.pid, row.pid_start, None, row.user,
                row.command, row.job_source, row.job_id, row.job_account,
                row.memory_used_bytes_max, None, now, receipt_pk))
        else:
            judge.process(index, process_record(row), now)
    for index, record in enumerate(body.get("events") or ()):
        judge.event(index, record, node_id, now)
    return out
