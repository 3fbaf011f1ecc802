"""The demo's back-filled history: the real agent on a fake clock, stored by the real
ingestion service, rolled up by the usual outbox."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from gpuquota.core.timeutil import Period, hour_floor
from gpuquota.demo import history as demo_history
from gpuquota.demo.history import demo_history_backfill
from gpuquota.demo.management.commands import seed_demo
from gpuquota.demo.organisation import (
    FAULTY_NODE,
    demo_gpu_uuid,
    demo_nodes,
    demo_organisation_seed,
)
from gpuquota.demo.reservations import demo_reservations_seed
from gpuquota.ingest.models import AgentBatch, GpuEvent, Sample
from gpuquota.inventory.models import Gpu, GpuHealthInterval
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.reservations.models import Reservation
from gpuquota.usage.models import GpuHourUsage
from tests.usage.factories import reservation_figures

pytestmark = pytest.mark.django_db

TTS = "[demo] TTS training"  # a demo reservation that started a day ago, on two busy GPUs


@pytest.fixture
def now():
    """Mid-window, in the past hour: the history starts and ends with partial hours, and
    its first window is a partial one, as an agent started at any instant makes."""
    return hour_floor(timezone.now()) - timedelta(minutes=52, seconds=30)


@pytest.fixture
def demo_org():
    demo_organisation_seed()


def test_every_demo_gpu_has_samples_across_the_history_and_its_rollups(demo_org, now):
    stored = demo_history_backfill(hours=1, now=now)

    start, end = now - timedelta(hours=1), now - timedelta(minutes=7, seconds=30)
    physical = Gpu.objects.filter(parent__isnull=True)
    assert physical.count() == 96
    expected = {demo_gpu_uuid(demo.hostname, index) for demo in demo_nodes() for index in range(8)}
    assert set(physical.values_list("uuid", flat=True)) == expected
    for gpu in physical:
        windows = list(Sample.objects.filter(gpu_id=gpu.id).order_by("window_start")
                       .values_list("window_start", "window_end"))
        # a partial first window up to the next 10-minute boundary, then whole windows
        assert windows[0][0] == start and windows[-1][1] == end, gpu.uuid
        assert all(b - a == timedelta(minutes=10) for a, b in windows[1:])
        assert all(prev[1] == nxt[0] for prev, nxt in zip(windows, windows[1:], strict=False))
        hours = set(GpuHourUsage.objects.filter(gpu_id=gpu.id).values_list("hour", flat=True))
        assert hours == {hour_floor(a) for a, _ in windows}, gpu.uuid
    assert stored == Sample.objects.count() > 96 * 6  # the MIG devices report too
    assert not DirtyGpuHour.objects.exists()
    # The GPU that falls off the bus live keeps working through the history.
    assert not GpuEvent.objects.filter(type="gpu_lost").exists()
    assert not GpuHealthInterval.objects.filter(gpu__node__hostname=FAULTY_NODE).exists()


def test_a_current_reservation_shows_what_its_gpus_did(demo_org, now):
    demo_reservations_seed(now=timezone.now())
    reservation = Reservation.objects.get(purpose=TTS)
    hostnames = set(reservation.assignments.values_list("gpu__node__hostname", flat=True))
    before = reservation_figures(reservation, Period(now - timedelta(hours=2), now))
    assert before.sums.busy_s == 0

    demo_history_backfill(hours=2, now=now, hostnames=hostnames)

    figures = reservation_figures(reservation, Period(now - timedelta(hours=2), now))
    assert figures.sums.covered_s > 0 and figures.utilization > 0.5
    assert Sample.objects.exclude(gpu__node__hostname__in=hostnames).count() == 0


def test_running_it_again_redoes_nothing(demo_org, now, monkeypatch):
    hostnames = {FAULTY_NODE}
    first = demo_history_backfill(hours=2, now=now, hostnames=hostnames)
    counts = (Sample.objects.count(), AgentBatch.objects.count(), GpuHourUsage.objects.count())

    def no_agent_run(**kwargs):
        raise AssertionError("the history was made again")

    monkeypatch.setattr(demo_history, "_spool_history", no_agent_run)
    assert first > 0
    assert demo_history_backfill(hours=2, now=now, hostnames=hostnames) == 0
    assert demo_history_backfill(hours=2, now=now + timedelta(seconds=59),
                                 hostnames=hostnames) == 0
    assert (Sample.objects.count(), AgentBatch.objects.count(),
            GpuHourUsage.objects.count()) == counts


def test_a_later_run_fills_only_the_hours_without_data(demo_org, now):
    hostnames = {FAULTY_NODE}
    demo_history_backfill(hours=1, now=now, hostnames=hostnames)
    gpu = Gpu.objects.get(uuid=demo_gpu_uuid(FAULTY_NODE, 0))
    last_end = Sample.objects.filter(gpu_id=gpu.id).latest("window_end").window_end

    demo_history_backfill(hours=1, now=now + timedelta(minutes=30), hostnames=hostnames)

    windows = list(Sample.objects.filter(gpu_id=gpu.id, window_start__gte=last_end)
                   .order_by("window_start").values_list("window_start", "window_end"))
    assert windows[0][0] == last_end
    assert windows[-1][1] == last_end + timedelta(minutes=30)
    assert len(windows) == 3


def test_seed_demo_backfills_after_the_organisation_and_its_reservations(monkeypatch):
    calls = []

    def backfill(*, hours, now):
        calls.append((hours, Reservation.objects.filter(purpose=TTS).exists()))
        return 1234

    monkeypatch.setattr(seed_demo, "demo_history_backfill", backfill)
    out = StringIO()
    call_command("seed_demo", history_hours=3, stdout=out)
    assert calls == [(3, True)]
    assert "Demo history: 1234 samples stored" in out.getvalue()
    call_command("seed_demo", history_hours=0, stdout=out)
    assert len(calls) == 1
    with pytest.raises(CommandError, match="0 or more"):
        call_command("seed_demo", history_hours=-1, stdout=out)
