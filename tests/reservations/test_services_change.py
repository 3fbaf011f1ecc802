"""Extend, shrink, swap, maintenance blocks and the lifecycle task."""

from datetime import timedelta

import pytest

from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.models import AuditEntry
from gpuquota.inventory.models import MaintenanceBlock
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import (
    NoCapacity,
    OverQuota,
    reservation_release,
    reservations_advance,
)
from gpuquota.reservations.services_change import (
    maintenance_block_create,
    reservation_extend,
    reservation_shrink,
    reservation_swap_gpu,
)
from gpuquota.reservations.tasks import BEAT_SCHEDULE, reservations_advance_task
from tests.factories import GpuClassFactory, make_gpu
from tests.reservations.factories import NOW

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
S = Reservation.Status


def request(fleet, **kwargs):
    return fleet.request(**kwargs)


def running(reservation, at):
    return list(reservation.assignments.filter(assigned_until__gt=at).order_by("gpu_id"))


# --- extend ----------------------------------------------------------------------------------

def test_extend_moves_the_end_of_every_held_gpu(fleet):
    r = request(fleet, count=2)
    extended = reservation_extend(reservation=r, actor=fleet.vision_lead, end=NOW + 6 * H, now=NOW)
    assert extended.end == NOW + 6 * H
    assert all(a.assigned_until == NOW + 6 * H for a in r.assignments.all())
    assert AuditEntry.objects.filter(action="reservation.extend").exists()


def test_extend_after_the_effective_end_is_refused(fleet):
    r = request(fleet, count=2, start=NOW, end=NOW + 3 * H)
    reservation_release(reservation=r, actor=fleet.vision_lead, now=NOW + H)
    with pytest.raises(Conflict):
        reservation_extend(reservation=r, actor=fleet.vision_lead, end=NOW + 6 * H, now=NOW + 2 * H)
    r.refresh_from_db()
    assert r.end == NOW + 3 * H


def test_extend_of_a_reservation_past_its_end_is_refused_even_if_not_advanced(fleet):
    r = request(fleet, count=1, start=NOW, end=NOW + H)
    with pytest.raises(Conflict) as exc:
        reservation_extend(reservation=r, actor=fleet.vision_lead, end=NOW + 3 * H, now=NOW + H)
    assert exc.value.field == "end"


def test_extend_into_another_booking_is_refused(fleet):
    r = request(fleet, count=4)
    request(fleet, team=fleet.speech, count=2, start=NOW + 3 * H, end=NOW + 4 * H)
    request(fleet, count=4, start=NOW + 3 * H, end=NOW + 4 * H)  # all 8 booked then
    with pytest.raises(Conflict):
        reservation_extend(reservation=r, actor=fleet.vision_lead, end=NOW + 5 * H, now=NOW)


def test_extend_over_quota_is_refused(fleet):
    r = request(fleet, count=3)
    request(fleet, count=1, start=NOW + 3 * H, end=NOW + 4 * H)
    request(fleet, count=1, start=NOW + 3 * H, end=NOW + 4 * H)
    with pytest.raises(OverQuota) as exc:
        reservation_extend(reservation=r, actor=fleet.vision_lead, end=NOW + 4 * H, now=NOW)
    assert exc.value.field == "end" and exc.value.code == "over_quota"


def test_extend_to_an_earlier_end_is_refused(fleet):
    r = request(fleet, count=1)
    with pytest.raises(DomainError) as exc:
        reservation_extend(reservation=r, actor=fleet.vision_lead, end=NOW + 2 * H, now=NOW)
    assert exc.value.field == "end"


def test_member_cannot_extend(fleet, roles):
    r = request(fleet, count=1)
    with pytest.raises(PermissionDenied):
        reservation_extend(reservation=r, actor=fleet.speech_lead, end=NOW + 5 * H, now=NOW)


# --- shrink ------------------------------------------------------------------------------------

def test_shrink_ends_the_extra_gpus_now(fleet):
    r = request(fleet, count=4, start=NOW, end=NOW + 5 * H)
    at = NOW + 2 * H
    reservation_shrink(reservation=r, actor=fleet.vision_lead, count=1, now=at)
    r.refresh_from_db()
    assert r.count == 1
    assert len(running(r, at)) == 1
    ended = r.assignments.filter(end_reason="shrunk")
    assert ended.count() == 3 and all(a.assigned_until == at for a in ended)
    assert DirtyGpuHour.objects.filter(hour=at).count() == 3


def test_shrink_before_start_frees_at_start(fleet):
    r = request(fleet, count=4)
    reservation_shrink(reservation=r, actor=fleet.vision_lead, count=2, now=NOW)
    ended = r.assignments.filter(end_reason="shrunk")
    assert ended.count() == 2 and all(a.assigned_until == a.assigned_from for a in ended)


@pytest.mark.parametrize("count", [0, 4, 5])
def test_shrink_must_keep_fewer_but_at_least_one(fleet, count):
    r = request(fleet, count=4)
    with pytest.raises(DomainError) as exc:
        reservation_shrink(reservation=r, actor=fleet.vision_lead, count=count, now=NOW)
    assert exc.value.field == "count"


# --- swap --------------------------------------------------------------------------------------

def test_swap_replaces_one_gpu_from_now_with_one_of_the_same_class(fleet):
    r = request(fleet, count=2, start=NOW, end=NOW + 5 * H)
    old = running(r, NOW)[0]
    at = NOW + H
    new = reservation_swap_gpu(reservation=r, actor=fleet.admin, gpu=old.gpu, now=at)
    old.refresh_from_db()
    assert old.assigned_until == at and old.end_reason == "swapped"
    assert new.assigned_from == at and new.assigned_until == NOW + 5 * H
    assert new.gpu.gpu_class == fleet.gpu_class and new.gpu != old.gpu
    assert new.gpu.node_id == old.gpu.node_id  # same node preferred
    assert len(running(r, at)) == 2


def test_swap_to_another_class_is_refused(fleet):
    r = request(fleet, count=1, start=NOW, end=NOW + 5 * H)
    l4 = make_gpu(gpu_class=GpuClassFactory(name="L4"))
    with pytest.raises(DomainError) as exc:
        reservation_swap_gpu(reservation=r, actor=fleet.admin, gpu=running(r, NOW)[0].gpu,
                             replacement=l4, now=NOW + H)
    assert exc.value.field == "replacement"


def test_swap_to_a_booked_gpu_is_refused(fleet):
    r = request(fleet, count=1, start=NOW, end=NOW + 5 * H)
    other = request(fleet, team=fleet.speech, count=1, start=NOW, end=NOW + 5 * H)
    with pytest.raises(NoCapacity):
        reservation_swap_gpu(reservation=r, actor=fleet.admin, gpu=running(r, NOW)[0].gpu,
                             replacement=running(other, NOW)[0].gpu, now=NOW + H)


# --- maintenance -------------------------------------------------------------------------------

def test_maintenance_block_takes_a_gpu_out_of_capacity(fleet):
    for gpu in fleet.gpus[1:]:
        maintenance_block_create(gpu=gpu, start=NOW, end=NOW + 10 * H, reason="PSU swap",
                                 actor=fleet.admin)
    assert MaintenanceBlock.objects.count() == 7
    with pytest.raises(NoCapacity):
        request(fleet, count=2)
    assert AuditEntry.objects.filter(action="maintenance.block").count() == 7


def test_maintenance_block_on_an_assigned_gpu_is_refused(fleet):
    r = request(fleet, count=1)
    gpu = running(r, NOW)[0].gpu
    with pytest.raises(Conflict) as exc:
        maintenance_block_create(gpu=gpu, start=NOW, end=None, reason="x", actor=fleet.admin)
    assert f"#{r.pk}" in exc.value.message


def test_only_admins_block_gpus(fleet):
    with pytest.raises(PermissionDenied):
        maintenance_block_create(gpu=fleet.gpus[0], start=NOW, end=None, reason="x",
                                 actor=fleet.vision_lead)


# --- lifecycle ---------------------------------------------------------------------------------

def test_advance_moves_scheduled_to_active_to_ended_idempotently(fleet):
    r = request(fleet, count=1, start=NOW + H, end=NOW + 2 * H)
    pending = request(fleet, count=5, start=NOW + H, end=NOW + 2 * H)
    assert reservations_advance(now=NOW) == {"activated": 0, "ended": 0, "expired": 0}
    assert reservations_advance(now=NOW + H)["activated"] == 1
    r.refresh_from_db()
    assert r.status == S.ACTIVE
    assert reservations_advance(now=NOW + H) == {"activated": 0, "ended": 0, "expired": 0}
    assert reservations_advance(now=NOW + 2 * H) == {"activated": 0, "ended": 1, "expired": 1}
    r.refresh_from_db()
    pending.refresh_from_db()
    assert r.status == S.ENDED and pending.status == S.DENIED
    assert reservations_advance(now=NOW + 2 * H) == {"activated": 0, "ended": 0, "expired": 0}


def test_advance_ends_a_scheduled_reservation_whose_window_passed(fleet):
    r = request(fleet, count=1, start=NOW + H, end=NOW + 2 * H)
    assert reservations_advance(now=NOW + 3 * H)["ended"] == 1
    r.refresh_from_db()
    assert r.status == S.ENDED


def test_the_beat_task_is_named_and_scheduled(fleet, time_machine):
    request(fleet, count=1, start=NOW + H, end=NOW + 2 * H)
    entry = BEAT_SCHEDULE["reservations-advance"]
    assert entry["task"] == reservations_advance_task.name == "reservations.advance"
    time_machine.move_to(NOW + H + timedelta(seconds=1))
    assert reservations_advance_task()["activated"] == 1
    assert reservations_advance_task()["activated"] == 0
