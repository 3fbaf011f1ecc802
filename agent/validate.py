"""The protocol's validation table, applied before a record is spooled: null what is out of range.

The server would null the same fields; doing it here keeps a quirky GPU from costing a record and
makes every nulling visible in the agent's log, next to the reading that caused it.
"""

from __future__ import annotations

import re
from typing import Any

UUID_RE = re.compile(r"^(GPU|MIG)-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")
MAX_PID = 4194304
MAX_STRING = 256
PERCENT_TOLERANCE = 0.01

Record = dict[str, Any]


def _null_unless(record: Record, key: str, ok: bool, nulled: list[str]) -> None:
    if record.get(key) is not None and not ok:
        record[key] = None
        nulled.append(key)


def _percent(record: Record, key: str, nulled: list[str]) -> None:
    value = record.get(key)
    if value is None:
        return
    if 100 < value <= 100 + PERCENT_TOLERANCE:
        record[key] = 100.0
    _null_unless(record, key, 0 <= value <= 100 + PERCENT_TOLERANCE, nulled)


def _within(record: Record, key: str, low: float, high: float | None, nulled: list[str]) -> None:
    value = record.get(key)
    if value is not None:
        _null_unless(record, key, low <= value and (high is None or value <= high), nulled)


def _avg_not_above_max(record: Record, avg: str, top: str, slack: float,
                       nulled: list[str]) -> None:
    if record.get(avg) is not None and record.get(top) is not None:
        _null_unless(record, avg, record[avg] <= record[top] + slack, nulled)


def clean_sample(sample: Record, *, memory_total_bytes: int | None,
                 power_limit_w: float | None, window_s: int) -> list[str]:
    """Null every nullable field of `sample` that the protocol's table puts out of range."""
    nulled: list[str] = []
    for key in ("util_gpu_avg", "util_gpu_max", "util_mem_avg"):
        _percent(sample, key, nulled)
    _avg_not_above_max(sample, "util_gpu_avg", "util_gpu_max", PERCENT_TOLERANCE, nulled)
    for key in ("memory_used_bytes_avg", "memory_used_bytes_max"):
        _within(sample, key, 0, memory_total_bytes, nulled)
    _avg_not_above_max(sample, "memory_used_bytes_avg", "memory_used_bytes_max", 0, nulled)
    power_cap = 3 * power_limit_w if power_limit_w else None
    _within(sample, "power_w_avg", 0, power_cap, nulled)
    _within(sample, "energy_j", 0, power_cap * window_s if power_cap else None, nulled)
    _within(sample, "temp_c_max", -40, 150, nulled)
    for key in ("ecc_uncorrected", "ecc_corrected"):
        _within(sample, key, 0, None, nulled)
    return nulled


def clean_strings(record: Record, keys: tuple[str, ...]) -> None:
    """Cut free-text fields to the protocol's 256 characters."""
    for key in keys:
        if isinstance(record.get(key), str):
            record[key] = record[key][:MAX_STRING]


def process_is_valid(process: Record) -> bool:
    """Whether the server could place this process record (GPU UUID and pid in range)."""
    return bool(UUID_RE.match(process["gpu_uuid"])) and 1 <= process["pid"] <= MAX_PID


def clean_process(process: Record) -> list[str]:
    """Null what the server would refuse in a process record; cut the command to 256 chars."""
    nulled: list[str] = []
    clean_strings(process, ("command",))
    _percent(process, "util_sm_avg", nulled)
    _within(process, "memory_used_bytes_max", 0, None, nulled)
    user = process.get("user")
    _null_unless(process, "user", user is None or len(user) <= MAX_STRING, nulled)
    return nulled
