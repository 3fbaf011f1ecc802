"""GPU health by the spec's table, automatic close after a reboot, admin recovery."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpuquota.core.errors import Conflict, PermissionDenied
from gpuquota.core.models import AuditEntry
from gpuquota.ingest.health import gpu_health_recover
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import AdminFactory, UserFactory, make_gpu
from tests.usage.factories import T0, add_event, add_samples, mig_device, minute_samples

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)


def states(gpu):
    return [(i.state, i.valid_from, i.valid_until, i.reason)
            for i in GpuHealthInterval.objects.filter(gpu=gpu).order_by("valid_from")]


def ev(minutes):
    return T0 + timedelta(minutes=minutes)


@pytest.mark.parametrize("type_, xid", [("gpu_lost", None)]
                         + [("xid", x) for x in (48, 64, 79, 95, 119, 120)])
def test_failing_events(type_, xid):
    gpu = make_gpu()
    add_event(gpu, ev(10), type_, xid)
    dirty_hours_process()
    [(state, start, until, _reason)] = states(gpu)
    assert (state, start, until) == ("failed", ev(10), None)


@pytest.mark.parametrize("type_, xid", [("remap_pending", None)]
                         + [("xid", x) for x in (63, 74, 92, 94)])
def test_degrading_events(type_, xid):
    gpu = make_gpu()
    add_event(gpu, ev(10), type_, xid)
    dirty_hours_process()
    assert [s[0] for s in states(gpu)] == ["degraded"]


@pytest.mark.parametrize("type_, xid", [("xid", x) for x in (13, 31, 43, 45)]
                         + [("counter_reset", None), ("clock_skew", None),
                            ("ecc_uncorrected", None)])
def test_other_events_change_nothing(type_, xid):
    """Only the table's rows change health: an `ecc_uncorrected` event is not one (the
    uncorrected count in a sample is)."""
    gpu = make_gpu()
    add_event(gpu, ev(10), type_, xid)
    dirty_hours_process()
    assert states(gpu) == []


def test_uncorrected_ecc_in_a_sample_fails_the_gpu_and_its_busy_time_is_kept_apart():
    gpu = make_gpu()
    minute_samples(gpu, T0, 10)
    add_samples(gpu, [{"start": ev(10), "ecc_uncorrected": 2}])
    minute_samples(gpu, ev(11), 9)
    dirty_hours_process()
    dirty_hours_process()  # the hours the new interval marked
    assert states(gpu)[0][:3] == ("failed", ev(10), None)
    rows = {r.failed: r.busy_s for r in GpuHourUsage.objects.filter(gpu=gpu, hour=T0)}
    assert rows == {False: 600, True: 600}


def test_degraded_then_failed_splits_and_failed_then_degraded_changes_nothing():
    gpu = make_gpu()
    add_event(gpu, ev(5), "xid", 63)
    add_event(gpu, ev(10), "xid", 79)
    add_event(gpu, ev(15), "remap_pending")
    dirty_hours_process()
    assert [(s, a, b) for s, a, b, _ in states(gpu)] == [
        ("degraded", ev(5), ev(10)), ("failed", ev(10), None)]
    dirty_hours_process()  # idempotent
    assert len(states(gpu)) == 2


def test_mig_device_event_fails_the_parent():
    gpu = make_gpu()
    device = mig_device(gpu, 0)
    add_event(device, ev(3), "xid", 79)
    dirty_hours_process()
    assert [s[0] for s in states(gpu)] == ["failed"]
    assert states(device) == []


def test_failed_closes_at_first_good_sample_after_a_new_boot():
    gpu = make_gpu()
    add_event(gpu, ev(10), "gpu_lost", boot="boot-1")
    dirty_hours_process()
    # a good sample from the old boot does not close it
    add_samples(gpu, [{"start": ev(11), "boot": "boot-1"}])
    dirty_hours_process()
    assert states(gpu)[0][2] is None
    # new boot: a sample without readings does not close it, the next with readings does
    add_samples(gpu, [{"start": ev(29), "readings": 0, "util": None, "boot": "boot-2"},
                      {"start": ev(31), "readings": 1, "util": 0, "boot": "boot-2"}])
    dirty_hours_process()
    [(state, start, until, _)] = states(gpu)
    assert (state, start, until) == ("failed", ev(10), ev(31))
    assert GpuHealthInterval.objects.get(gpu=gpu).closed_reason.startswith("new boot boot-2")


def test_admin_recovery_in_the_past_is_audited_and_recomputes():
    gpu = make_gpu()
    admin = AdminFactory()
    minute_samples(gpu, T0, 60)
    add_event(gpu, ev(0), "gpu_lost")
    dirty_hours_process()
    dirty_hours_process()
    assert {r.failed for r in GpuHourUsage.objects.filter(gpu=gpu)} == {True}
    with pytest.raises(PermissionDenied):
        gpu_health_recover(gpu=gpu, at=ev(30), by=UserFactory(), note="")
    gpu_health_recover(gpu=gpu, at=ev(30), by=admin, note="reseated the card")
    assert states(gpu)[0][2] == ev(30)
    assert AuditEntry.objects.filter(action="gpu_health_recover", actor=admin).exists()
    assert DirtyGpuHour.objects.filter(gpu=gpu, hour=T0).exists()
    dirty_hours_process()
    rows = {r.failed: r.busy_s for r in GpuHourUsage.objects.filter(gpu=gpu, hour=T0)}
    assert rows == {True: 1800, False: 1800}
    with pytest.raises(Conflict):
        gpu_health_recover(gpu=gpu, at=ev(40), by=admin, note="")
    with pytest.raises(Exception, match="future"):
        gpu_health_recover(gpu=gpu, at=timezone.now() + H, by=admin, note="")


def test_failed_ends_at_the_earlier_of_admin_recovery_and_the_good_sample():
    """An admin recovered at :40, then late data shows a good sample of a new boot at
    :25: the interval ends at :25 (accounting.md, Inventory)."""
    gpu = make_gpu()
    add_event(gpu, ev(10), "gpu_lost", boot="boot-1")
    dirty_hours_process()
    gpu_health_recover(gpu=gpu, at=ev(40), by=AdminFactory(), note="reseated")
    dirty_hours_process()
    add_samples(gpu, [{"start": ev(25), "readings": 3, "util": 0, "boot": "boot-2",
                       "received_at": ev(50)}])
    dirty_hours_process()
    [(state, start, until, _)] = states(gpu)
    assert (state, start, until) == ("failed", ev(10), ev(25))
    assert DirtyGpuHour.objects.filter(gpu=gpu, hour=T0).exists()
    # a good sample after the admin's time changes nothing
    other = make_gpu(index=1)
    add_event(other, ev(10), "gpu_lost", boot="boot-1")
    dirty_hours_process()
    gpu_health_recover(gpu=other, at=ev(20), by=AdminFactory(), note="")
    add_samples(other, [{"start": ev(25), "readings": 3, "util": 0, "boot": "boot-2"}])
    dirty_hours_process()
    assert states(other)[0][2] == ev(20)
