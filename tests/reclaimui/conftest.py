from datetime import UTC, datetime, timedelta

import pytest

from gpuquota.ingest.partitions import partitions_ensure
from tests.reclaimui.factories import policy_settings, reclaim_fleet


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Raw-data partitions (PostgreSQL) for the days around today these tests write on."""
    today = datetime.now(UTC).date()
    with django_db_blocker.unblock():
        partitions_ensure(days=[today + timedelta(days=d) for d in range(-3, 3)])


@pytest.fixture(autouse=True)
def _short_lookback(settings):
    policy_settings(settings)


@pytest.fixture
def fleet(roles):
    return reclaim_fleet(roles)


@pytest.fixture
def vision_rec(fleet):
    return fleet.recommendation(fleet.reservations[0])
