"""An agent's sample records judged a column at a time, by the judge's rules (`records.Judge`).

Almost every sample an agent sends is plain: its GPU and window are known and valid, every
value is of the type the judge keeps as it is and in range. Such a sample's row is the
judge's without asking it. Whether the samples of one GPU are all plain is tested per field
over all of them at once, in C (types, minimum, maximum, NaN, avg <= max); a sample of a GPU
with one odd value among them, or with a window the judge refuses, goes through
`Judge.sample` as before, in its place, so what is stored, nulled, clamped or rejected, the
paths named and the order of it all are the per-record judge's (tests/ingest/test_columns.py).
The telemetry importer's rows use the same column tests (`rows._run_plain`).
"""

import sys
from datetime import datetime
from functools import partial
from itertools import groupby, repeat
from operator import is_not, itemgetter, le

from gpuquota.ingest.parsing import fields_of
from gpuquota.ingest.protocol import CheckedRecords
from gpuquota.ingest.records import INT32, INT64, PROFILING, GpuRef, Judge, Outcome

SAMPLE_FIELDS = (
    "gpu_uuid",
    "window_start",
    "window_end",
    "readings",
    "util_gpu_avg",
    "util_gpu_max",
    "util_mem_avg",
    "memory_used_bytes_avg",
    "memory_used_bytes_max",
    "power_w_avg",
    "energy_j",
    "temp_c_max",
    "clock_event_reasons",
    "ecc_uncorrected",
    "ecc_corrected",
    *PROFILING,
)
INTS = frozenset({int})
FLOATS = frozenset({float})
NUMBERS = frozenset({int, float})  # what the judge keeps as it is where it takes a number
FLOAT_MAX = sys.float_info.max  # a float column's bound where the judge asks only "finite"
_NONE = type(None)
_PRESENT = partial(is_not, None)


def column_plain(
    values, kinds: frozenset, low: float, high: float, *, nullable: bool = True,
    found: frozenset | None = None,
) -> bool:
    """Whether every value of a column is None (where `nullable`) or of a type in `kinds` in
    [low, high] (NaN never is: a sum with one is NaN). Within the bounds no integer is too
    large for a float sum. `found`: the column's types when the structure check read them."""
    found = set(map(type, values)) if found is None else set(found)
    if nullable and _NONE in found:
        found.discard(_NONE)
        if not found:
            return True
        if not found <= kinds:
            return False
        values = list(filter(_PRESENT, values))
    elif not found or not found <= kinds:
        return False
    if not (low <= min(values) and max(values) <= high):
        return False
    return float not in found or (total := sum(values)) == total


def ordered(lows, highs) -> bool:
    """avg <= max in every row where both are known."""
    if None in lows or None in highs:
        return all(
            a <= b for a, b in zip(lows, highs, strict=True) if a is not None and b is not None
        )
    return all(map(le, lows, highs))


def _bounds(gpu: GpuRef, lengths: list) -> list[tuple[int, frozenset, float, float, bool]]:
    """(column in `SAMPLE_FIELDS`, types kept, low, high, nullable) of every value the judge
    bounds, for one GPU's samples. Energy's bound is the shortest valid window's, which no
    sample's own exceeds."""
    memory_high = gpu.memory_total_bytes if gpu.memory_total_bytes is not None else INT64
    power_high = 3 * gpu.power_limit_w if gpu.power_limit_w else FLOAT_MAX
    energy_high = power_high * min(lengths) if gpu.power_limit_w else FLOAT_MAX
    return [
        (3, INTS, 0, INT32, False),  # readings
        *((at, NUMBERS, 0, 100, True) for at in (4, 5, 6, 15, 16, 17, 18)),  # percentages
        (7, INTS, 0, memory_high, True),
        (8, INTS, 0, memory_high, True),
        (9, NUMBERS, 0, power_high, True),
        (10, NUMBERS, 0, energy_high, True),
        (11, INTS, -40, 150, True),  # temperature
        *((at, INTS, 0, INT64, True) for at in (12, 13, 14)),  # clock reasons, ECC counts
    ]


def _gpu_plain(gpu, columns: list, windows: dict, *, types: list | None = None,
               pairs=None) -> bool:
    """Whether the judge takes every value of one GPU's samples as it is (`columns`: theirs,
    in `SAMPLE_FIELDS` order; `types`: their types where known; `pairs`: their distinct
    windows where known). A sample whose window is refused is judged on its own anyway."""
    if type(gpu) is not GpuRef:
        return False
    if pairs is None:
        pairs = set(zip(columns[1], columns[2], strict=True))
    lengths = [w[2] for pair in pairs if len(w := windows[pair]) == 3]
    if not lengths:
        return False
    types = types or [None] * len(columns)
    return all(
        column_plain(columns[at], kinds, low, high, nullable=nullable, found=types[at])
        for at, kinds, low, high, nullable in _bounds(gpu, lengths)
    ) and ordered(columns[4], columns[5]) and ordered(columns[7], columns[8])  # avg <= max


def _plain_gpus(columns: list, gpus: dict, windows: dict, types: list | None) -> dict:
    """GPU UUID (as sent) -> whether its samples are all plain. Tested over the whole batch
    where its GPUs share their bounds (a node of one model: the common case), else GPU by
    GPU, the samples sorted by GPU (stably, in C) so that each GPU's values are one slice of
    each column."""
    refs = list(gpus.values())
    bounds = {(g.memory_total_bytes, g.power_limit_w) if type(g) is GpuRef else g for g in refs}
    if len(bounds) == 1 and _gpu_plain(refs[0], columns, windows, types=types, pairs=windows):
        return dict.fromkeys(gpus, True)
    uuids = columns[0]
    if len(uuids) == 1:
        by_gpu = [[column[0]] for column in columns]
    else:
        pick = itemgetter(*sorted(range(len(uuids)), key=uuids.__getitem__))
        by_gpu = [pick(column) for column in columns]
    plain, first = {}, 0
    for uuid, run in groupby(by_gpu[0]):
        last = first + len(list(run))
        plain[uuid] = _gpu_plain(gpus[uuid], [c[first:last] for c in by_gpu], windows)
        first = last
    return plain


def samples_judge(judge: Judge, records: list, received_at) -> None:
    """Each sample record's row, or what it was not taken for, into `judge.out`, in the
    records' order: `judge.sample` of each, asked only for those that are not plain."""
    if not records:
        return
    if type(records) is CheckedRecords:  # read by the structure check
        columns = [records.columns[name] for name in SAMPLE_FIELDS]
        types = [records.types[name] for name in SAMPLE_FIELDS]
    else:
        columns, types = fields_of(records, SAMPLE_FIELDS), None
    uuids, starts, ends = columns[:3]
    gpus = {uuid: judge.gpu(uuid) for uuid in set(uuids)}
    windows = {pair: judge.window_check(*pair) for pair in set(zip(starts, ends, strict=True))}
    plain = _plain_gpus(columns, gpus, windows, types)
    bounds = list(map(windows.__getitem__, zip(starts, ends, strict=True)))
    ids = [gpu.id if type(gpu) is GpuRef else None for gpu in map(gpus.__getitem__, uuids)]
    rows = zip(
        ids,
        [b[0] for b in bounds],
        [b[1] for b in bounds],
        *columns[3:],
        repeat(received_at),
        repeat(judge.boot_pk),
        repeat(judge.receipt_pk),
    )
    out = judge.out.samples
    if all(plain.values()) and all(len(w) == 3 for w in windows.values()):
        out.extend(rows)
        return
    for index, (row, uuid, window) in enumerate(zip(rows, uuids, bounds, strict=True)):
        if plain[uuid] and len(window) == 3:
            out.append(row)
        else:
            judge.sample(index, records[index], received_at)


def records_judge(
    *,
    body: dict,
    gpus: dict,
    node_id: int,
    now: datetime,
    check_age: bool = True,
    boot_pk: int | None = None,
    receipt_pk: int | None = None,
) -> Outcome:
    """Rows for every record of `body` that can be stored (samples and events with the
    batch's boot, samples and processes with its receipt); the rest listed as rejected."""
    judge = Judge(gpus=gpus, now=now, check_age=check_age, boot_pk=boot_pk, receipt_pk=receipt_pk)
    samples_judge(judge, body.get("samples") or [], now)
    for index, record in enumerate(body.get("processes") or ()):
        judge.process(index, record, now)
    for index, record in enumerate(body.get("events") or ()):
        judge.event(index, record, node_id, now)
    return judge.out
