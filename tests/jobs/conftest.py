from datetime import UTC, date, datetime, timedelta

import pytest

from gpuquota.ingest.partitions import partitions_ensure


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Raw-data partitions (PostgreSQL) for the days these tests write samples on."""
    with django_db_blocker.unblock():
        today = datetime.now(UTC).date()  # the browser test's jobs ran in the last hours
        partitions_ensure(days=[date(2026, 11, 1) + timedelta(days=d) for d in range(4)]
                          + [today + timedelta(days=d) for d in (-1, 0, 1)])


@pytest.fixture(autouse=True)
def _raw_data_kept(monkeypatch):
    from gpuquota.ingest import conf as ingest_conf

    monkeypatch.setattr(ingest_conf, "RAW_SAMPLE_RETENTION_DAYS", 100 * 365)
