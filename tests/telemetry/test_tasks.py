"""Beat's pull: a source is pulled when its interval has passed, not again before; a
failure is recorded on the source (never an exception out of the worker)."""

import pytest
import time_machine

from gpuquota.telemetry.models import TelemetrySource
from gpuquota.telemetry.tasks import source_pull_one, sources_pull

pytestmark = pytest.mark.django_db


def test_due_sources_are_pulled_once_per_interval(cluster):
    source = TelemetrySource.objects.create(
        name="down", cluster=cluster, kind="prometheus", base_url="http://127.0.0.1:9",
        interval_s=60)
    TelemetrySource.objects.create(name="off", cluster=cluster, kind="prometheus",
                                   base_url="http://127.0.0.1:9", enabled=False)
    with time_machine.travel("2026-12-01T10:00:00Z", tick=False):
        assert sources_pull() == 1
        source.refresh_from_db()
        assert "cannot connect" in source.last_error and source.failures == 1
        assert sources_pull() == 0  # pulled a moment ago
    with time_machine.travel("2026-12-01T10:01:00Z", tick=False):
        assert sources_pull() == 1
    source.refresh_from_db()
    assert source.failures == 2


def test_a_disabled_or_deleted_source_is_not_pulled(cluster):
    source = TelemetrySource.objects.create(name="off", cluster=cluster, kind="prometheus",
                                            base_url="http://127.0.0.1:9", enabled=False)
    assert source_pull_one(source_id=source.pk) == 0
    assert source_pull_one(source_id=source.pk + 1000) == 0
    source.refresh_from_db()
    assert source.last_pull_at is None
