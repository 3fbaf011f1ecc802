"""The Quota and Reservation rules of accounting.md, one test per rule."""

from datetime import timedelta

import pytest
from django.db.models import F

from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.models import AuditEntry
from gpuquota.inventory.models import GpuHealthInterval, MaintenanceBlock
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.reservations.services import (
    NoCapacity,
    reservation_approve,
    reservation_cancel,
    reservation_deny,
    reservation_release,
)
from tests.factories import MembershipFactory, UserFactory
from tests.reservations.factories import NOW, Fleet, mig_of

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
S = Reservation.Status


def request(fleet, **kwargs):
    return fleet.request(**kwargs)


def held(reservation):
    live = reservation.assignments.exclude(assigned_until=F("assigned_from"))
    return list(live.order_by("gpu_id"))


# --- in quota, over quota -----------------------------------------------------------

def test_in_quota_request_is_scheduled_with_specific_gpus(fleet):
    r = request(fleet, count=3)
    assert r.status == S.SCHEDULED and not r.over_quota
    assignments = held(r)
    assert len(assignments) == 3
    assert all(a.assigned_from == r.start and a.assigned_until == r.end for a in assignments)
    assert len({a.gpu.node_id for a in assignments}) == 1  # packed onto one node
    entry = AuditEntry.objects.get(action="reservation.request", object_id=str(r.pk))
    assert entry.actor == fleet.vision_lead and len(entry.changes["gpus"]) == 3


def test_start_within_five_minutes_tolerance_is_active_at_once(fleet):
    r = request(fleet, start=NOW - timedelta(minutes=4))
    assert r.status == S.ACTIVE and r.start == NOW - timedelta(minutes=4)


def test_lead_cannot_start_in_the_past(fleet):
    with pytest.raises(DomainError) as exc:
        request(fleet, start=NOW - timedelta(minutes=6))
    assert exc.value.field == "start"
    assert not Reservation.objects.exists()


def test_over_quota_request_is_pending_and_holds_nothing(fleet):
    r = request(fleet, count=5)  # quota 4
    assert r.status == S.PENDING and r.over_quota
    assert not r.assignments.exists()


def test_quota_is_checked_at_every_instant_with_existing_reservations(fleet):
    request(fleet, count=3, start=NOW + H, end=NOW + 3 * H)
    assert request(fleet, count=1, start=NOW + 2 * H, end=NOW + 4 * H).status == S.SCHEDULED
    # at NOW+2H the team already holds 4: one more is over quota
    assert request(fleet, count=1, start=NOW + 2 * H, end=NOW + 5 * H).status == S.PENDING
    # after NOW+4H only... nothing held: in quota
    assert request(fleet, count=4, start=NOW + 4 * H, end=NOW + 5 * H).status == S.SCHEDULED


def test_no_quota_row_means_zero(fleet):
    fleet.speech.quotas.all().delete()
    assert request(fleet, team=fleet.speech).status == S.PENDING


def test_touching_windows_are_not_overlapping():
    fleet = Fleet.create(sizes=(4,), vision_quota=8)
    a, b, c = NOW + H, NOW + 2 * H, NOW + 3 * H
    first = request(fleet, count=4, start=a, end=b)
    second = request(fleet, count=4, start=b, end=c)  # the same 4 GPUs, touching
    assert first.status == second.status == S.SCHEDULED
    assert {x.gpu_id for x in held(first)} == {x.gpu_id for x in held(second)}
    with pytest.raises(NoCapacity):
        request(fleet, count=1, start=b - timedelta(seconds=1), end=b)


def test_touching_windows_do_not_add_up_against_quota(fleet):
    a, b, c = NOW + H, NOW + 2 * H, NOW + 3 * H
    assert request(fleet, count=4, start=a, end=b).status == S.SCHEDULED
    assert request(fleet, count=4, start=b, end=c).status == S.SCHEDULED  # quota 4
    assert request(fleet, count=1, start=b - timedelta(seconds=1), end=b).status == S.PENDING


# --- bad input ------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"start": NOW + 2 * H, "end": NOW + H}, "end"),
        ({"start": NOW + H, "end": NOW + H}, "end"),
        ({"count": 0}, "count"),
        ({"count": -2}, "count"),
        ({"count": 100_000}, "count"),
        ({"end": NOW + timedelta(days=400)}, "end"),
        ({"placement": "rack"}, "placement"),
    ],
)
def test_bad_requests_are_refused_naming_the_field(fleet, kwargs, field):
    with pytest.raises(DomainError) as exc:
        request(fleet, **kwargs)
    assert exc.value.field == field
    assert not Reservation.objects.exists()


def test_a_member_cannot_request(fleet):
    member = UserFactory(username="m")
    MembershipFactory(user=member, team=fleet.vision)
    with pytest.raises(PermissionDenied):
        request(fleet, by=member)


def test_sub_second_times_are_truncated(fleet):
    r = request(fleet, start=NOW + H + timedelta(microseconds=900_000))
    assert r.start == NOW + H


# --- capacity ----------------------------------------------------------------------------

def test_refusal_says_how_many_are_free_and_when_enough_are():
    fleet = Fleet.create(vision_quota=8)
    request(fleet, team=fleet.vision, count=4, start=NOW + H, end=NOW + 5 * H)
    request(fleet, team=fleet.speech, count=2, start=NOW + H, end=NOW + 3 * H)
    with pytest.raises(NoCapacity) as exc:
        request(fleet, count=4, start=NOW + 2 * H, end=NOW + 3 * H)
    assert exc.value.field == "count"
    assert exc.value.free_gpus == 2
    assert "2 H100-80GB GPU(s) free" in exc.value.message
    assert exc.value.next_free == NOW + 3 * H
    assert "2026-12-01 13:00" in exc.value.message
    assert not Reservation.objects.filter(start=NOW + 2 * H).exists()
    assert exc.value.code == "no_capacity"


def test_failed_and_maintenance_gpus_are_not_capacity(fleet):
    for gpu in fleet.gpus[:3]:
        GpuHealthInterval.objects.create(gpu=gpu, state="failed", valid_from=NOW - H,
                                         reason="xid 79")
    GpuHealthInterval.objects.create(gpu=fleet.gpus[3], state="degraded", valid_from=NOW - H,
                                     reason="xid 63")
    for gpu in fleet.gpus[4:7]:
        MaintenanceBlock.objects.create(gpu=gpu, valid_from=NOW, valid_until=NOW + 2 * H,
                                        reason="firmware", created_by=fleet.admin)
    with pytest.raises(NoCapacity) as exc:
        request(fleet, count=3)
    assert exc.value.free_gpus == 2  # the degraded one counts as healthy
    r = request(fleet, count=2)
    assert {a.gpu_id for a in held(r)} == {fleet.gpus[3].id, fleet.gpus[7].id}
    # after the maintenance block ends, those GPUs are back
    assert request(fleet, team=fleet.speech, count=2, start=NOW + 2 * H,
                   end=NOW + 3 * H).status == S.SCHEDULED


def test_retired_gpus_leave_capacity_from_their_retirement(fleet):
    for gpu in fleet.gpus[:7]:
        gpu.retired_at = NOW + 2 * H
        gpu.save()
    assert request(fleet, count=4, start=NOW, end=NOW + 2 * H).status == S.ACTIVE
    with pytest.raises(NoCapacity):
        request(fleet, team=fleet.speech, count=2, start=NOW + 2 * H, end=NOW + 3 * H)


def test_mig_devices_are_never_assigned():
    fleet = Fleet.create(sizes=(1,))
    migs = [mig_of(fleet.gpus[0]) for _ in range(3)]
    with pytest.raises(NoCapacity):
        request(fleet, count=2)
    r = request(fleet, count=1)
    assert [a.gpu_id for a in held(r)] == [fleet.gpus[0].id]
    assert not Assignment.objects.filter(gpu__in=migs).exists()


def test_same_node_placement_uses_one_node_or_refuses():
    fleet = Fleet.create(sizes=(3, 3), vision_quota=6)
    with pytest.raises(NoCapacity) as exc:
        request(fleet, count=4, placement="same_node")
    assert "on one node" in exc.value.message
    r = request(fleet, count=4)
    assert len({a.gpu.node_id for a in held(r)}) == 2
    r2 = request(fleet, count=2, placement="same_node", start=NOW + 5 * H, end=NOW + 6 * H)
    assert len({a.gpu.node_id for a in held(r2)}) == 1


def test_any_placement_packs_into_the_tightest_node():
    fleet = Fleet.create(sizes=(4, 2), vision_quota=6)
    r = request(fleet, count=2)
    assert {a.gpu.node_id for a in held(r)} == {fleet.nodes[1].id}
    r = request(fleet, count=3)
    assert {a.gpu.node_id for a in held(r)} == {fleet.nodes[0].id}


def test_the_database_refuses_double_booking_on_postgres_only_via_services(fleet):
    r = request(fleet, count=1)
    gpu = held(r)[0].gpu
    other = request(fleet, team=fleet.speech, count=1)
    assert held(other)[0].gpu != gpu


# --- guarantees and approval ---------------------------------------------------------------

def test_over_quota_approval_keeps_other_teams_guarantees():
    fleet = Fleet.create(sizes=(4, 4), vision_quota=2, speech_quota=4)
    held_already = request(fleet, count=2)  # vision's whole quota, in the same window
    too_big = request(fleet, count=3)  # 6 free, 4 of them speech's unused guarantee
    fits = request(fleet, count=4, start=NOW + 4 * H, end=NOW + 5 * H)
    assert too_big.status == fits.status == S.PENDING and held_already.status == S.SCHEDULED
    with pytest.raises(NoCapacity) as exc:
        reservation_approve(reservation=too_big, actor=fleet.admin, now=NOW)
    assert "guarantees" in exc.value.message and "only 2" in exc.value.message
    too_big.refresh_from_db()
    assert too_big.status == S.PENDING and not too_big.assignments.exists()
    approved = reservation_approve(reservation=fits, actor=fleet.admin, reason="ok", now=NOW)
    assert approved.status == S.SCHEDULED and approved.approved_at == NOW
    assert len(held(approved)) == 4
    # speech's guarantee still holds: its 4 in-quota GPUs are there
    assert request(fleet, team=fleet.speech, count=4, start=NOW + 4 * H,
                   end=NOW + 5 * H).status == S.SCHEDULED


def test_guarantee_in_use_is_not_reserved_twice():
    fleet = Fleet.create(sizes=(4, 4), vision_quota=2, speech_quota=4)
    request(fleet, team=fleet.speech, count=4)  # speech uses its guarantee
    pending = request(fleet, count=4)
    approved = reservation_approve(reservation=pending, actor=fleet.admin, now=NOW)
    assert approved.status == S.SCHEDULED


def test_approval_when_capacity_has_gone_is_refused_with_the_reason(fleet):
    pending = request(fleet, count=5)
    request(fleet, team=fleet.speech, count=2)
    request(fleet, count=4)
    with pytest.raises(NoCapacity) as exc:
        reservation_approve(reservation=pending, actor=fleet.admin, now=NOW)
    assert "2 H100-80GB GPU(s)" in exc.value.message
    pending.refresh_from_db()
    assert pending.status == S.PENDING and pending.decided_by is None


def test_late_approval_assigns_from_approval_and_charges_from_it(fleet):
    pending = request(fleet, count=5, start=NOW + H, end=NOW + 4 * H)
    later = NOW + 2 * H
    approved = reservation_approve(reservation=pending, actor=fleet.admin, now=later)
    assert approved.status == S.ACTIVE and approved.approved_at == later
    assert all(a.assigned_from == later for a in held(approved))


def test_only_admins_approve_and_deny(fleet):
    pending = request(fleet, count=5)
    with pytest.raises(PermissionDenied):
        reservation_approve(reservation=pending, actor=fleet.vision_lead, now=NOW)
    with pytest.raises(PermissionDenied):
        reservation_deny(reservation=pending, actor=fleet.vision_lead, reason="no", now=NOW)


def test_deny_needs_a_reason_and_holds_nothing(fleet):
    pending = request(fleet, count=5)
    with pytest.raises(DomainError) as exc:
        reservation_deny(reservation=pending, actor=fleet.admin, reason="  ", now=NOW)
    assert exc.value.field == "reason"
    denied = reservation_deny(reservation=pending, actor=fleet.admin, reason="budget", now=NOW)
    assert denied.status == S.DENIED and denied.decision_reason == "budget"
    assert not denied.assignments.exists()
    assert AuditEntry.objects.filter(action="reservation.deny", reason="budget").exists()
    with pytest.raises(Conflict):
        reservation_approve(reservation=denied, actor=fleet.admin, now=NOW)


def test_approving_a_passed_window_is_refused(fleet):
    pending = request(fleet, count=5)
    with pytest.raises(Conflict):
        reservation_approve(reservation=pending, actor=fleet.admin, now=NOW + 4 * H)


# --- cancel, release ----------------------------------------------------------------------

def test_cancel_before_start_ends_assignments_at_start_zero_seconds(fleet):
    r = request(fleet, count=4)
    cancelled = reservation_cancel(reservation=r, actor=fleet.vision_lead, now=NOW)
    assert cancelled.status == S.CANCELLED
    rows = list(r.assignments.all())
    assert len(rows) == 4
    assert all(a.assigned_until == a.assigned_from == r.start for a in rows)
    assert all(a.end_reason == "cancelled" for a in rows)
    # the GPUs are free again
    assert request(fleet, count=4).status == S.SCHEDULED


def test_cancel_after_start_is_refused(fleet):
    r = request(fleet, count=1)
    with pytest.raises(Conflict):
        reservation_cancel(reservation=r, actor=fleet.vision_lead, now=NOW + H)


def test_cancel_pending(fleet):
    r = request(fleet, count=5)
    assert reservation_cancel(reservation=r, actor=fleet.vision_lead, now=NOW).status == S.CANCELLED


def test_release_ends_assignments_now_and_marks_usage_dirty(fleet):
    r = request(fleet, count=2, start=NOW, end=NOW + 5 * H)
    at = NOW + 2 * H + timedelta(minutes=30)
    released = reservation_release(reservation=r, actor=fleet.vision_lead, now=at)
    assert released.status == S.ENDED
    assert all(a.assigned_until == at and a.end_reason == "released" for a in r.assignments.all())
    gpu_ids = [a.gpu_id for a in r.assignments.all()]
    assert set(DirtyGpuHour.objects.filter(gpu_id__in=gpu_ids).values_list("hour", flat=True)) == {
        NOW + 2 * H}
    # freed capacity is usable from the release
    assert request(fleet, count=2, start=at, end=at + H, now=at).status == S.ACTIVE


def test_release_before_start_is_refused(fleet):
    r = request(fleet, count=2)
    with pytest.raises(Conflict):
        reservation_release(reservation=r, actor=fleet.vision_lead, now=NOW)


def test_lead_of_another_team_cannot_release(fleet):
    r = request(fleet, count=2, start=NOW)
    with pytest.raises(PermissionDenied):
        reservation_release(reservation=r, actor=fleet.speech_lead, now=NOW + H)


# --- backfill ----------------------------------------------------------------------------------

def test_admin_backfills_a_past_reservation(fleet):
    start, end = NOW - 30 * H, NOW - 28 * H
    r = request(fleet, count=2, start=start, end=end, by=fleet.admin)
    assert r.is_backfill and r.status == S.ENDED
    assert len(held(r)) == 2
    hours = set(DirtyGpuHour.objects.values_list("hour", flat=True))
    assert hours == {start, start + H}
    assert AuditEntry.objects.filter(action="reservation.backfill").exists()


def test_backfill_cannot_double_book_the_past(fleet):
    start, end = NOW - 30 * H, NOW - 28 * H
    request(fleet, count=8, start=start, end=end, by=fleet.admin)
    with pytest.raises(NoCapacity):
        request(fleet, team=fleet.speech, count=1, start=start, end=end, by=fleet.admin)


def test_more_than_other_teams_guarantees_can_ever_leave_is_refused_at_once():
    fleet = Fleet.create(sizes=(4, 4), vision_quota=2, speech_quota=4)
    with pytest.raises(NoCapacity) as exc:
        request(fleet, count=5)
    assert "leave Vision at most 4 H100-80GB GPUs in that window" in exc.value.message
    assert "guaranteed quotas (4 of the 8 in service)" in exc.value.message
    assert not Reservation.objects.exists()
    assert request(fleet, count=4).status == S.PENDING  # possible once approved


def test_same_node_beyond_the_largest_node_is_refused_at_once():
    fleet = Fleet.create(sizes=(4, 2), vision_quota=2, speech_quota=0)
    with pytest.raises(NoCapacity) as exc:
        request(fleet, count=5, placement="same_node")
    assert "no H100-80GB node has 5 GPUs (the largest has 4)" in exc.value.message
    assert not Reservation.objects.exists()
    assert request(fleet, count=4, placement="same_node").status == S.PENDING


def test_more_gpus_than_the_class_has_is_refused_not_left_pending(fleet):
    with pytest.raises(NoCapacity) as exc:
        request(fleet, count=9)
    assert exc.value.message == (
        "No capacity: 9 asked, but only 8 H100-80GB GPUs are in service in that window, never "
        "enough at once (8 are free for all of it); ask for at most 6, what other teams' "
        "quotas leave Vision.")
    assert not Reservation.objects.exists()


def test_more_than_in_service_names_the_teams_own_maximum_as_the_hint_does():
    """The refusal's "ask for at most" is the team's ceiling (what the form's hint says),
    not the GPUs in service, which other teams' quotas keep in part."""
    fleet = Fleet.create(sizes=(4, 4), vision_quota=2, speech_quota=4)
    with pytest.raises(NoCapacity) as exc:
        request(fleet, count=9)
    assert exc.value.message.endswith(
        "ask for at most 4, what other teams' quotas leave Vision.")
