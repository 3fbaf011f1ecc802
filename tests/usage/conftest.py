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
