from datetime import UTC, date, datetime, timedelta

import pytest

from gpuquota.ingest.partitions import partitions_ensure


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Raw-data partitions (PostgreSQL) for the days these tests write samples on."""
    today = datetime.now(UTC).date()
    days = [date(2026, 10, 25) + timedelta(days=d) for d in range(14)]
    days += [today + timedelta(days=d) for d in range(-10, 3)]
    with django_db_blocker.unblock():
        partitions_ensure(days=days)


@pytest.fixture(autouse=True)
def _raw_data_kept(monkeypatch):
    """These tests use fixed dates; keep their raw samples "within retention" whatever
    today's date is (tests of the retention horizon set their own)."""
    from gpuquota.ingest import conf as ingest_conf

    monkeypatch.setattr(ingest_conf, "RAW_SAMPLE_RETENTION_DAYS", 100 * 365)
