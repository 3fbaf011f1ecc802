"""Daily range partitions of the raw tables on PostgreSQL, and raw-data retention.

Partitions are created ahead by a beat task and on demand before a batch is
stored; a DEFAULT partition (made by migration 0001) takes any row inserted
otherwise (the ORM, a script), and its rows move to their daily partition when
that is created. So a missing partition is never an error. Old partitions are
dropped whole after RAW_SAMPLE_RETENTION_DAYS.
"""

import logging
import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from gpuquota.core.timeutil import hour_floor
from gpuquota.ingest import conf
from gpuquota.ingest.models import AgentBatch, ProcessRecord, Sample

logger = logging.getLogger(__name__)

PARTITIONED = (Sample, ProcessRecord)
AGENT_BATCH_RETENTION_DAYS = 30  # the protocol asks for at least 8
_NAME = re.compile(r"_p(\d{8})$")
_LOCK_KEY = 4_471_903  # pg_advisory_xact_lock key serialising partition DDL

_known: dict[str, set[date]] = {}


def _partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def partitions_list(*, table: str) -> dict[date, str]:
    """The daily partitions of `table`: first day → partition name."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s", [table])
        names = [row[0] for row in cursor.fetchall()]
    found = {}
    for name in names:
        if match := _NAME.search(name):
            found[datetime.strptime(match.group(1), "%Y%m%d").date()] = name
    return found


def default_partition_name(table: str) -> str:
    return f"{table}_default"


def _partition_create(cursor, table: str, day: date) -> None:
    """A daily partition; rows that waited for it in the DEFAULT partition move into it."""
    name, default = _partition_name(table, day), default_partition_name(table)
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    bounds = [start, start + timedelta(days=1)]
    cursor.execute(f"SELECT 1 FROM {default} WHERE window_start >= %s AND window_start < %s "
                   "LIMIT 1", bounds)
    if cursor.fetchone() is None:
        cursor.execute(f"CREATE TABLE {name} PARTITION OF {table} "
                       "FOR VALUES FROM (%s) TO (%s)", bounds)
        return
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # ATTACH refuses pending trigger events
    cursor.execute(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
                   "INCLUDING INDEXES)")
    cursor.execute(f"WITH moved AS (DELETE FROM {default} WHERE window_start >= %s AND "
                   f"window_start < %s RETURNING *) INSERT INTO {name} SELECT * FROM moved",
                   bounds)
    cursor.execute(f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)",
                   bounds)


def partitions_ensure(*, days: Iterable[date]) -> int:
    """Every raw table has a partition for each of `days`; returns how many were created.

    Cheap when they exist (a per-process cache); a no-op off PostgreSQL."""
    if connection.vendor != "postgresql":
        return 0
    days = set(days)
    created = 0
    for model in PARTITIONED:
        table = model._meta.db_table
        missing = days - _known.get(table, set())
        if not missing:
            continue
        _known[table] = set(partitions_list(table=table))
        missing = days - _known[table]
        if not missing:
            continue
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
            missing -= set(partitions_list(table=table))  # made meanwhile by another process
            for day in sorted(missing):
                _partition_create(cursor, table, day)
                created += 1
        _known[table] |= days
    if created:
        logger.info("created %d raw-data partition(s) for %s", created, sorted(days))
    return created


def partitions_create_ahead(*, today: date, days_ahead: int | None = None) -> int:
    """Partitions from yesterday to `days_ahead` days after `today` (the beat task)."""
    ahead = conf.PARTITIONS_AHEAD_DAYS if days_ahead is None else days_ahead
    return partitions_ensure(days=[today + timedelta(days=d) for d in range(-1, ahead + 1)])


def raw_data_horizon() -> datetime:
    """Hours before this have (or may soon have) lost their raw samples."""
    days = conf.RAW_SAMPLE_RETENTION_DAYS - 1
    return hour_floor(timezone.now() - timedelta(days=days))


def raw_data_expire(*, today: date, retention_days: int | None = None) -> int:
    """Drop raw samples and process records older than the retention (whole daily partitions
    on PostgreSQL, rows elsewhere), and batch receipts past 30 days; returns what was dropped
    (partitions, or rows)."""
    keep = conf.RAW_SAMPLE_RETENTION_DAYS if retention_days is None else retention_days
    cutoff_day = today - timedelta(days=keep)
    cutoff = datetime(cutoff_day.year, cutoff_day.month, cutoff_day.day, tzinfo=UTC)
    AgentBatch.objects.filter(
        received_at__lt=timezone.now() - timedelta(days=AGENT_BATCH_RETENTION_DAYS)).delete()
    if connection.vendor != "postgresql":
        return sum(m.objects.filter(window_start__lt=cutoff).delete()[0] for m in PARTITIONED)
    dropped = 0
    for model in PARTITIONED:
        table = model._meta.db_table
        old = [name for day, name in partitions_list(table=table).items() if day < cutoff_day]
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
            # Deferred foreign-key checks of this transaction's inserts would block the drop.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            for name in old:
                cursor.execute(f"DROP TABLE IF EXISTS {name}")
                dropped += 1
            cursor.execute(f"DELETE FROM {default_partition_name(table)} WHERE window_start < %s",
                           [cutoff])
        _known.pop(table, None)
    if dropped:
        logger.info("dropped %d raw-data partition(s) before %s", dropped, cutoff_day)
    return dropped
