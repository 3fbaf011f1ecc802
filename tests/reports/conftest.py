from datetime import date, timedelta

import pytest

from gpuquota.ingest.partitions import partitions_ensure


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Raw-data partitions (PostgreSQL) for the month these tests bill (October 2026)."""
    days = [date(2026, 9, 28) + timedelta(days=d) for d in range(42)]
    with django_db_blocker.unblock():
        partitions_ensure(days=days)


@pytest.fixture(autouse=True)
def _raw_data_kept(monkeypatch):
    """Fixed dates: keep their raw samples "within retention" whatever today is."""
    from gpuquota.ingest import conf as ingest_conf
    from gpuquota.ingest import partitions

    monkeypatch.setattr(ingest_conf, "RAW_SAMPLE_RETENTION_DAYS", 100 * 365)
    partitions._known.clear()
    yield
    partitions._known.clear()
