"""Bulk storage of samples, process records and events, first stored wins.

PostgreSQL: one binary `COPY` straight into the table at a savepoint (for 8 rows too: a
multi-row `INSERT ... ON CONFLICT DO NOTHING` costs more, docs/benchmarks.md). Where that
meets a record already stored (a re-sent sample under another batch id, a record stored meanwhile
by another batch) it is undone and the rows are copied into a per-connection temporary
staging table, then inserted by one `INSERT ... SELECT ... ON CONFLICT DO NOTHING
RETURNING`; a second query counts conflicts only when some rows were not stored. SQLite
(the embedded default): one `INSERT ... ON CONFLICT DO NOTHING` per row.
"""

import weakref
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from operator import itemgetter

from django.db import connection, models, transaction
from psycopg.errors import UniqueViolation

from gpuquota.core.timeutil import hour_floor
from gpuquota.ingest.models import GpuEvent, ProcessRecord, Sample
from gpuquota.ingest.partitions import PARTITIONED, partitions_ensure
from gpuquota.ingest.pgnumeric import PercentBinaryDumper

ONE_SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class Table:
    """How one kind of record is stored: its columns, identity and instant."""

    model: type
    columns: tuple[str, ...]
    key: tuple[str, ...]
    gpu_column: str
    start_column: str  # the instant whose hour is marked dirty
    end_column: str | None  # the end of the window, for windows that cross an hour

    @property
    def name(self) -> str:
        return self.model._meta.db_table

    @property
    def values(self) -> tuple[str, ...]:
        """Columns that make two records with the same identity a conflict when they differ
        (not when, under which boot or in which batch they were delivered)."""
        return tuple(c for c in self.columns
                     if c not in self.key and c not in ("received_at", "boot_id", "receipt_id"))


SAMPLES = Table(
    Sample,
    ("gpu_id", "window_start", "window_end", "readings", "util_gpu_avg", "util_gpu_max",
     "util_mem_avg", "memory_used_bytes_avg", "memory_used_bytes_max", "power_w_avg",
     "energy_j", "temp_c_max", "clock_event_reasons", "ecc_uncorrected", "ecc_corrected",
     "sm_active_avg", "sm_occupancy_avg", "tensor_active_avg", "dram_active_avg",
     "received_at", "boot_id", "receipt_id"),
    ("gpu_id", "window_start"), "gpu_id", "window_start", "window_end")
PROCESSES = Table(
    ProcessRecord,
    ("gpu_id", "window_start", "window_end", "pid", "pid_start", "uid", "user", "command",
     "job_source", "job_id", "job_account", "memory_used_bytes_max", "util_sm_avg",
     "received_at", "receipt_id"),
    ("gpu_id", "window_start", "pid", "pid_start"), "gpu_id", "window_start", "window_end")
EVENTS = Table(
    GpuEvent,
    ("event_id", "node_id", "gpu_id", "ts", "type", "xid", "detail", "received_at", "boot_id"),
    ("event_id",), "gpu_id", "ts", None)


@dataclass
class Stored:
    """Counts for one kind, and the (gpu_id, instant) pairs of what was stored."""

    stored: int
    duplicates: int
    conflicts: int
    touched: list[tuple[int, datetime]]

    def counts(self) -> dict:
        return {"stored": self.stored, "duplicates": self.duplicates, "conflicts": self.conflicts}


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _stage_name(table: Table) -> str:
    return f"{table.name}_stage"


# Staging columns use types that psycopg dumps in binary straight from Python values; the
# INSERT ... SELECT casts them to the table's (float8 -> numeric(5,2) rounds like the table).
_BINARY_TYPES = {"BigIntegerField": "int8", "ForeignKey": "int8", "IntegerField": "int4",
                 "SmallIntegerField": "int2", "FloatField": "float8", "DecimalField": "float8",
                 "DateTimeField": "timestamptz", "CharField": "text", "UUIDField": "uuid"}


@cache
def _fields(table: Table) -> list[models.Field]:
    by_column = {f.column: f for f in table.model._meta.concrete_fields if f.column}
    return [by_column[c] for c in table.columns]


@cache
def _stage_types(table: Table) -> tuple[str, ...]:
    types = []
    for field in _fields(table):
        kind = field.get_internal_type()
        types.append(_BINARY_TYPES["DateTimeField" if isinstance(field, models.DateTimeField)
                                   else kind])
    return tuple(types)


# Raw connections whose staging tables are committed (a rolled-back creation is forgotten).
_staged: "weakref.WeakKeyDictionary[object, set[str]]" = weakref.WeakKeyDictionary()


def _stage_ensure(cursor, stage: str, table: Table, types: tuple[str, ...]) -> None:
    """The connection's temporary staging table: created once, emptied at every commit."""
    raw = connection.connection
    if stage in _staged.get(raw, ()):
        return
    definition = ", ".join(f"{_q(c)} {t}" for c, t in zip(table.columns, types, strict=True))
    cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {stage} ({definition}) "
                   "ON COMMIT DELETE ROWS")
    transaction.on_commit(lambda: _staged.setdefault(raw, set()).add(stage))


@cache
def _copy_sql(table: Table) -> tuple[str, tuple[str, ...]]:
    """The `COPY` of `table`'s columns and their binary types (percentages as numeric)."""
    columns = ", ".join(_q(c) for c in table.columns)
    types = tuple("numeric" if f.get_internal_type() == "DecimalField" else t
                  for f, t in zip(_fields(table), _stage_types(table), strict=True))
    return f"COPY {table.name} ({columns}) FROM STDIN (FORMAT BINARY)", types


def _copy_new(table: Table, rows: list[tuple]) -> Stored | None:
    """Rows none of which is stored yet (nearly always) straight into the table: one binary
    `COPY` at a savepoint, about half of what staging them costs PostgreSQL. None, with
    nothing written, when one is stored already or being stored by another batch."""
    if not _copied(table, rows):
        return None
    return Stored(len(rows), 0, 0, _hours_touched(table, rows))


def _copied(table: Table, rows: list[tuple]) -> bool:
    """`_copy_new`'s `COPY`: False, with nothing written, when a row is stored already."""
    sql, types = _copy_sql(table)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.adapters.register_dumper(None, PercentBinaryDumper)
            with cursor.copy(sql) as copy:
                copy.set_types(types)
                deque(map(copy.write_row, rows), maxlen=0)  # the loop in C
    except UniqueViolation:
        return False
    return True


def _hours_touched(table: Table, rows: list[tuple]) -> list[tuple[int, datetime]]:
    """(gpu_id, hour) for every hour that a row's window touches: the hours (in epoch hours)
    worked out once per window (a batch's windows repeat for each of its GPUs), paired with
    the GPUs in C."""
    gpu = itemgetter(table.columns.index(table.gpu_column))
    window = itemgetter(table.columns.index(table.start_column),
                        table.columns.index(table.end_column or table.start_column))
    last_s = 1 if table.end_column else 0  # a window's last second is in its last hour
    windows = list(map(window, rows))
    hours = {bounds: frozenset({int(bounds[0].timestamp()) // 3600,
                                (int(bounds[1].timestamp()) - last_s) // 3600})
             for bounds in set(windows)}
    pairs = set(zip(map(gpu, rows), map(hours.__getitem__, windows), strict=True))
    return sorted((gpu_id, datetime.fromtimestamp(3600 * hour, UTC))
                  for gpu_id, hour in {(gpu_id, hour) for gpu_id, found in pairs
                                       if gpu_id is not None for hour in found})


def _postgres_store(table: Table, rows: list[tuple]) -> Stored:
    if table.model in PARTITIONED:
        # Normally made already (before the batch's transaction): then this is a cache hit.
        at = table.columns.index(table.start_column)
        # a batch's windows repeat for every GPU: each instant converted once
        partitions_ensure(days={instant.astimezone(UTC).date()
                                for instant in set(map(itemgetter(at), rows))})
    return _copy_new(table, rows) or _staged_store(table, rows)


def _staged_store(table: Table, rows: list[tuple]) -> Stored:
    """Rows of which some are stored already: staged, then inserted where new."""
    stage = _stage_name(table)
    columns = ", ".join(_q(c) for c in table.columns)
    key = ", ".join(_q(c) for c in table.key)
    start = _q(table.start_column)
    last = f"{_q(table.end_column)} - interval '1 second'" if table.end_column else start
    with connection.cursor() as cursor:
        types = _stage_types(table)
        _stage_ensure(cursor, stage, table, types)
        with cursor.copy(f"COPY {stage} ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(types)
            for row in rows:
                copy.write_row(row)
        # What was stored, summed up per GPU and the hours its records touch.
        cursor.execute(
            f"WITH stored AS (INSERT INTO {table.name} ({columns}) SELECT {columns} FROM {stage} "
            f"ON CONFLICT ({key}) DO NOTHING "
            f"RETURNING {_q(table.gpu_column)} AS gpu, {start} AS first, {last} AS last) "
            "SELECT gpu, date_trunc('hour', first, 'UTC'), date_trunc('hour', last, 'UTC'), "
            "count(*) FROM stored GROUP BY 1, 2, 3")
        touched, stored = set(), 0
        for gpu_id, first_hour, last_hour, count in cursor.fetchall():
            stored += count
            if gpu_id is not None:
                touched |= {(gpu_id, first_hour), (gpu_id, last_hour)}
        conflicts = 0
        if stored < len(rows):
            target = {f.column: f.db_type(connection) for f in _fields(table)}
            differs = " OR ".join(f"CAST(s.{_q(c)} AS {target[c]}) IS DISTINCT FROM t.{_q(c)}"
                                  for c in table.values)
            join = " AND ".join(f"s.{_q(c)} = t.{_q(c)}" for c in table.key)
            cursor.execute(f"SELECT count(*) FROM {stage} s JOIN {table.name} t ON {join} "
                           f"WHERE {differs}")
            conflicts = cursor.fetchone()[0]
        # Emptied now too: several batches may share one transaction (tests, imports).
        cursor.execute(f"DELETE FROM {stage}")
    return Stored(stored, len(rows) - stored - conflicts, conflicts, sorted(touched))


def _touched(returned: list[tuple]) -> list[tuple[int, datetime]]:
    """(gpu_id, instant) for every hour a stored record touches (a window may cross one)."""
    pairs = []
    for gpu_id, start, *end in returned:
        if gpu_id is None:
            continue
        pairs.append((gpu_id, start))
        if end:
            last = end[0] - ONE_SECOND
            if hour_floor(last) != hour_floor(start):
                pairs.append((gpu_id, last))
    return pairs


def _simple_store(table: Table, rows: list[tuple]) -> Stored:
    """Row by row, for SQLite; the identity's unique index decides what is stored."""
    by_column = {f.column: f for f in table.model._meta.concrete_fields if f.column}
    fields = [by_column[c] for c in table.columns]
    columns = ", ".join(_q(c) for c in table.columns)
    marks = ", ".join(["%s"] * len(table.columns))
    key_positions = [table.columns.index(c) for c in table.key]
    value_positions = [table.columns.index(c) for c in table.values]
    insert = (f"INSERT INTO {table.name} ({columns}) VALUES ({marks}) "
              f"ON CONFLICT ({', '.join(_q(c) for c in table.key)}) DO NOTHING")
    differs = (f"SELECT 1 FROM {table.name} WHERE "
               + " AND ".join(f"{_q(c)} = %s" for c in table.key) + " AND ("
               + " OR ".join(f"{_q(table.columns[i])} IS NOT %s" for i in value_positions) + ")")
    touched, conflicts, stored = [], 0, 0
    gpu_at = table.columns.index(table.gpu_column)
    start_at = table.columns.index(table.start_column)
    end_at = table.columns.index(table.end_column) if table.end_column else None
    with connection.cursor() as cursor:
        for row in rows:
            params = [f.get_db_prep_save(v, connection) for f, v in zip(fields, row, strict=True)]
            cursor.execute(insert, params)
            if cursor.rowcount == 1:
                stored += 1
                ends = (row[end_at],) if end_at is not None else ()
                touched += _touched([(row[gpu_at], row[start_at], *ends)])
                continue
            cursor.execute(differs, [params[i] for i in key_positions]
                           + [params[i] for i in value_positions])
            conflicts += cursor.fetchone() is not None
    return Stored(stored, len(rows) - stored - conflicts, conflicts, touched)


def records_store(*, table: Table, rows: list[tuple]) -> Stored:
    """Store rows (in `table.columns` order) in the caller's transaction; identities already
    stored are skipped and counted as duplicates, or conflicts when their values differ."""
    if not rows:
        return Stored(0, 0, 0, [])
    if connection.vendor == "postgresql":
        return _postgres_store(table, rows)
    return _simple_store(table, rows)



def records_store_parts(*, table: Table, parts: list[list[tuple]]) -> list[Stored]:
    """`records_store` of each part in turn (several batches' rows), in one binary `COPY`
    when none of them is stored yet (nearly always); otherwise part by part, so that each
    part's counts are its own. In the caller's transaction."""
    rows = [row for part in parts for row in part]
    if rows and connection.vendor == "postgresql":
        if table.model in PARTITIONED:
            at = table.columns.index(table.start_column)
            partitions_ensure(days={instant.astimezone(UTC).date()
                                    for instant in set(map(itemgetter(at), rows))})
        if _copied(table, rows):
            return [Stored(len(part), 0, 0, _hours_touched(table, part) if part else [])
                    for part in parts]
    return [records_store(table=table, rows=part) for part in parts]
