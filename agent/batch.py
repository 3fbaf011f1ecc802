"""Wire records of protocol version 1: samples, processes, events, and the batch around them."""

from __future__ import annotations

import uuid
from typing import Any

from agent.model import GpuInfo, Owner
from agent.validate import clean_strings
from agent.windows import GpuWindow, iso, round_half_up

SCHEMA_VERSION = 1
NODE_EVENT_TYPES = frozenset({"nvml_unavailable", "agent_restart", "data_dropped", "clock_skew"})
LIMITS = {"samples": 5000, "processes": 5000, "events": 1000}  # beyond these the server says 413

Record = dict[str, Any]


def gpu_record(gpu: GpuInfo) -> Record:
    """The inventory entry of one GPU or MIG device."""
    record = {"uuid": gpu.uuid, "index": gpu.index, "name": gpu.name,
              "pci_bus_id": gpu.pci_bus_id, "memory_total_bytes": gpu.memory_total_bytes,
              "power_limit_w": gpu.power_limit_w, "mig_parent_uuid": gpu.mig_parent_uuid}
    if gpu.serial is not None:  # optional fields: absent where the board has none
        record["serial"] = gpu.serial
    if gpu.board_part_number is not None:
        record["board_part_number"] = gpu.board_part_number
    return record


def sample_record(gpu: GpuInfo, window: GpuWindow, deltas: dict[str, int | None],
                  start: int, end: int) -> Record:
    """One GPU over one window, averages rounded half-up to two decimals."""
    memory_avg = window.memory_used.avg()
    energy_mj = deltas["energy_mj"]
    return {
        "gpu_uuid": gpu.uuid, "window_start": iso(start), "window_end": iso(end),
        "readings": window.readings,
        "util_gpu_avg": round_half_up(window.util_gpu.avg()),
        "util_gpu_max": round_half_up(window.util_gpu.max),
        "util_mem_avg": round_half_up(window.util_mem.avg()),
        "memory_used_bytes_avg": None if memory_avg is None else int(round_half_up(memory_avg, 0)),
        "memory_used_bytes_max": window.memory_used.max,
        "power_w_avg": round_half_up(window.power_w.avg()),
        "energy_j": None if energy_mj is None else round_half_up(energy_mj / 1000, 3),
        "temp_c_max": window.temp_c_max,
        "clock_event_reasons": window.clock_event_reasons,
        "ecc_uncorrected": deltas["ecc_uncorrected"],
        "ecc_corrected": deltas["ecc_corrected"],
    }


def job_record(owner: Owner | None) -> Record | None:
    """The job part of a process record."""
    if owner is None:
        return None
    return {"source": owner.source, "id": owner.job_id, "account": owner.account}


def event_record(event_type: str, gpu_uuid: str | None, ts: float, *, xid: int | None = None,
                 detail: str | None = None) -> Record:
    """A new event with its own identity; node-level types never carry a GPU."""
    record = {"event_id": str(uuid.uuid4()),
              "gpu_uuid": None if event_type in NODE_EVENT_TYPES else gpu_uuid,
              "ts": iso(ts), "type": event_type, "xid": xid, "detail": detail}
    clean_strings(record, ("detail",))
    return record


def batch_record(*, instance_id: str, seq_first: int, seq_last: int, node: Record,
                 gpus: list[Record], samples: list[Record], processes: list[Record],
                 events: list[Record], sent_at: float) -> Record:
    """A whole batch with a new batch_id."""
    return {"schema_version": SCHEMA_VERSION, "batch_id": str(uuid.uuid4()),
            "agent_instance_id": instance_id, "seq_first": seq_first, "seq_last": seq_last,
            "sent_at": iso(sent_at), "node": node, "gpus": gpus, "samples": samples,
            "processes": processes, "events": events}


def node_record(*, hostname: str, agent_version: str, driver_version: str | None,
                boot_id: str | None, spool_backlog: int, dropped_records_total: int) -> Record:
    """The node part of a batch."""
    record = {"hostname": hostname, "agent_version": agent_version,
              "driver_version": driver_version, "boot_id": boot_id,
              "spool_backlog": spool_backlog, "dropped_records_total": dropped_records_total}
    clean_strings(record, ("hostname",))
    return record


def _units(batch: Record) -> list[list[tuple[str, Record]]]:
    """The batch's records in groups that travel together: a sample with the process
    records of its window (the server takes a window's owners only from the records stored
    with its sample), every other record alone."""
    units, by_window = [], {}
    for sample in batch["samples"]:
        unit = by_window[(sample["gpu_uuid"], sample["window_start"])] = [("samples", sample)]
        units.append(unit)
    for record in batch["processes"]:
        unit = by_window.get((record["gpu_uuid"], record["window_start"]))
        if unit is None:
            units.append([("processes", record)])
        else:
            unit.append(("processes", record))
    return units + [[("events", event)] for event in batch["events"]]


def _halves(batch: Record, count: int) -> tuple[list, list]:
    """Two halves of the records, cut between units as near the middle as they allow (a
    single unit, a sample with every record, is cut in the middle)."""
    units = _units(batch)
    if len(units) < 2:
        records = units[0]
        return records[:count // 2], records[count // 2:]
    taken, cut = 0, len(units) - 1
    for i, unit in enumerate(units[:-1], 1):
        taken += len(unit)
        if 2 * taken >= count:
            cut = i
            break
    return ([r for unit in units[:cut] for r in unit], [r for unit in units[cut:] for r in unit])


def split_batch(batch: Record) -> list[Record] | None:
    """Two halves of `batch`, each with a new batch_id, or None when it holds one record.
    A sample and its window's process records stay in one half."""
    count = sum(len(batch[kind]) for kind in LIMITS)
    if count < 2:
        return None
    parts = []
    for chunk in _halves(batch, count):
        part = {**batch, "batch_id": str(uuid.uuid4())}
        for kind in LIMITS:
            part[kind] = [r for k, r in chunk if k == kind]
        seqs = [s["seq"] for s in part["samples"]]
        # A part without samples keeps the first seq of the batch it came from.
        part["seq_first"] = min(seqs, default=batch["seq_first"])
        part["seq_last"] = max(seqs, default=batch["seq_first"])
        parts.append(part)
    return parts
