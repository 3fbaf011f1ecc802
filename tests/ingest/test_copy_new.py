"""Records copied straight into their table (`storage._copy_new`): percentages stored in a
numeric(5,2) column as PostgreSQL's own cast from float8 stores them (the same value and
text, `ingest/pgnumeric.py`), and the hours marked for the rollups those the staged insert
returned (every hour a stored window touches, per GPU)."""

import random
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from gpuquota.core.timeutil import hour_floor
from gpuquota.ingest.pgnumeric import PercentBinaryDumper
from gpuquota.ingest.storage import EVENTS, SAMPLES, _hours_touched

TIES = [1.005, 2.675, 0.125, 0.005, 0.015, 99.995, 12.345, 0.1 + 0.2, 99.99499999999999, 1e-9]


@pytest.mark.django_db
@pytest.mark.postgres
def test_copied_percentages_equal_postgresqls_cast():
    rng = random.Random(7)
    values = [k / 1000 for k in range(0, 100_001, 7)] + [k / 8 for k in range(801)]
    values += [rng.uniform(0, 100) for _ in range(5000)] + TIES + [0, 7, 100, 0.0, 100.0]
    values += [-v for v in TIES] + [999.99, 999.994]
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE percent_check (i int, v float8, n numeric(5,2))")
        cursor.adapters.register_dumper(None, PercentBinaryDumper)
        with cursor.copy("COPY percent_check (i, v, n) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int4", "float8", "numeric"])
            for index, value in enumerate(values):
                copy.write_row((index, value, value))
        cursor.execute(
            "SELECT i, v, n::text, CAST(v AS numeric(5,2))::text FROM percent_check "
            "WHERE n::text IS DISTINCT FROM CAST(v AS numeric(5,2))::text"
        )
        assert cursor.fetchall() == []
        cursor.execute(
            "SELECT DISTINCT n::text FROM percent_check WHERE v IN (1.005, 0, 100) ORDER BY 1"
        )
        assert [row[0] for row in cursor.fetchall()] == ["0.00", "1.01", "100.00"]


def test_hours_touched_are_each_windows_first_and_last_seconds_hours():
    rng = random.Random(3)
    base = datetime(2026, 11, 30, 22, 58, tzinfo=UTC)
    rows = []
    for _ in range(2000):
        start = base + timedelta(seconds=rng.randrange(0, 7200))
        end = start + timedelta(seconds=rng.choice([1, 30, 60, 120, 600]))
        rows.append((rng.choice([1, 2, 3, None]), start, end, *(None,) * 19))
    second = timedelta(seconds=1)
    assert _hours_touched(SAMPLES, rows) == sorted(
        {
            (r[0], hour)
            for r in rows
            if r[0] is not None
            for hour in (hour_floor(r[1]), hour_floor(r[2] - second))
        }
    )
    events = [
        (
            None,
            None,
            rng.choice([1, None]),
            base + timedelta(seconds=rng.randrange(9000)),
            *(None,) * 5,
        )
        for _ in range(500)
    ]
    assert _hours_touched(EVENTS, events) == sorted(
        {(e[2], hour_floor(e[3])) for e in events if e[2] is not None}
    )
