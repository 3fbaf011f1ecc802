"""Percentages copied straight into a numeric(5,2) column (`ingest/pgnumeric.py`) are stored
as PostgreSQL's own cast from float8 stores them: the same value and the same text."""

import random

import pytest
from django.db import connection

from gpuquota.ingest.pgnumeric import PercentBinaryDumper

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

TIES = [1.005, 2.675, 0.125, 0.005, 0.015, 99.995, 12.345, 0.1 + 0.2, 99.99499999999999, 1e-9]


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
