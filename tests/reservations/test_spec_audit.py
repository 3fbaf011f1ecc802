"""Rules of accounting.md (Quota, Reservation, Inventory) found implemented differently
in the spec audit: one test per rule, each failing before its fix."""

from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from gpuquota.inventory.models import GpuClassInterval, MaintenanceBlock
from gpuquota.inventory.services import gpu_reclassify
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import NoCapacity
from tests.factories import GpuClassFactory
from tests.reservations.factories import NOW, Fleet

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
S = Reservation.Status


# --- Capacity: refusal says how many are free and when enough next become free ----------

def test_request_beyond_the_class_fleet_says_how_many_are_free():
    fleet = Fleet.create(vision_quota=2, speech_quota=2)
    fleet.request(team=fleet.speech, count=2)
    with pytest.raises(NoCapacity) as exc:
        fleet.request(count=9)  # 8 in service, 6 free
    assert exc.value.free_gpus == 6
    assert "(6 are free for all of it)" in exc.value.message
    assert "never enough at once" in exc.value.message  # never enough: said so
    assert not Reservation.objects.filter(team=fleet.vision).exists()


def test_same_node_refusal_counts_free_gpus_on_one_node_and_when_enough_are():
    fleet = Fleet.create(vision_quota=4, speech_quota=2)
    speech = fleet.request(team=fleet.speech, count=2)  # packed on node 00
    MaintenanceBlock.objects.create(gpu=fleet.gpus[4], valid_from=NOW, valid_until=None,
                                    reason="fan", created_by=fleet.admin)
    # free: 2 on node 00, 3 on node 01: 5 in all, but at most 3 on one node
    with pytest.raises(NoCapacity) as exc:
        fleet.request(count=4, placement="same_node")
    assert exc.value.free_gpus == 3
    assert "3 H100-80GB GPU(s) free on one node" in exc.value.message
    assert exc.value.next_free == speech.end
    assert "2026-12-01 13:00" in exc.value.message


# --- Inventory: class changes are intervals; capacity per class in force then ----------

def test_capacity_counts_a_gpu_in_the_class_it_has_in_the_window():
    fleet = Fleet.create(vision_quota=8)
    l4 = GpuClassFactory(name="L4")
    gpu = fleet.gpus[7]
    gpu_reclassify(gpu=gpu, gpu_class=l4, at=NOW + 4 * H)
    # before NOW+4h it is still an H100: all 8 can be reserved then
    r = fleet.request(count=8, start=NOW + H, end=NOW + 3 * H)
    assert r.status == S.SCHEDULED
    assert gpu.id in {a.gpu_id for a in r.assignments.all()}
    # from NOW+4h on it is an L4: only 7 H100s
    with pytest.raises(NoCapacity) as exc:
        fleet.request(count=8, start=NOW + 5 * H, end=NOW + 6 * H)
    assert exc.value.free_gpus == 7


def test_backfill_uses_the_class_in_force_in_the_past():
    fleet = Fleet.create(vision_quota=8)
    l4 = GpuClassFactory(name="L4")
    gpu = fleet.gpus[0]
    # the GPU was priced as an L4 until NOW - 1 day, and is an H100 since
    history = GpuClassInterval.objects.get(gpu=gpu)
    history.gpu_class = l4
    history.valid_until = NOW - timedelta(days=1)
    history.save()
    GpuClassInterval.objects.create(gpu=gpu, gpu_class=fleet.gpu_class,
                                    valid_from=NOW - timedelta(days=1))
    with pytest.raises(NoCapacity) as exc:
        fleet.request(count=8, start=NOW - timedelta(days=3), end=NOW - timedelta(days=2),
                      by=fleet.admin)
    assert exc.value.free_gpus == 7


# --- Roles: anyone else gets 404 for a team's data ----------------------------------------

@pytest.mark.parametrize("url", ["/api/v1/reservations", "/api/v1/audit"])
def test_api_list_filtered_by_a_team_the_caller_cannot_see_is_404(fleet, url):
    outsider_team_lead = fleet.speech_lead
    client = Client()
    client.force_login(outsider_team_lead)
    assert client.get(url, {"team": "vision"}).status_code == 404
    assert client.get(url, {"team": "no-such-team"}).status_code == 404
    assert client.get(url, {"team": "speech"}).status_code == 200
    client.force_login(fleet.admin)
    assert client.get(url, {"team": "vision"}).status_code == 200


# --- Quota: rows of one team and class never overlap (on SQLite too) ----------------------

@time_machine.travel(NOW, tick=False)  # the form refuses a row dated in the past
def test_admin_cannot_add_an_overlapping_quota_row(fleet):
    client = Client()
    client.force_login(fleet.admin)
    form = {"team": fleet.vision.pk, "gpu_class": fleet.gpu_class.pk, "gpus": 6,
            "valid_from_0": "2026-12-05", "valid_from_1": "00:00:00",
            "valid_until_0": "", "valid_until_1": ""}
    response = client.post("/admin/reservations/quota/add/", form)
    assert response.status_code == 200  # the form again, with the error
    assert "overlap" in response.content.decode()
    assert fleet.vision.quotas.count() == 1
    # a row after the open one is closed is fine
    quota = fleet.vision.quotas.get()
    quota.valid_until = NOW.replace(day=5, hour=0)  # the admin's time zone is UTC
    quota.save()
    response = client.post("/admin/reservations/quota/add/", form)
    assert response.status_code == 302
    assert fleet.vision.quotas.count() == 2


# --- Guarantees hold: also for an admin's over-quota backfill that runs into the future ----

def test_over_quota_backfill_into_the_future_respects_other_teams_guarantees(fleet):
    # 8 GPUs; speech's unused guarantee is 2, vision's quota 4: 7 would eat speech's
    with pytest.raises(NoCapacity) as exc:
        fleet.request(count=7, start=NOW - 2 * H, end=NOW + 2 * H, by=fleet.admin)
    assert "guarantees" in exc.value.message and exc.value.free_gpus == 6
    assert not Reservation.objects.exists()
    r = fleet.request(count=6, start=NOW - 2 * H, end=NOW + 2 * H, by=fleet.admin)
    assert r.is_backfill and r.over_quota and r.status == S.ACTIVE
    # wholly in the past there is no guarantee left to protect
    past = fleet.request(count=8, start=NOW - 6 * H, end=NOW - 4 * H, by=fleet.admin)
    assert past.status == S.ENDED


# --- A reservation starting within the lead's 5 minutes of tolerance reattributes the
#     past minutes: their usage is recomputed (marked dirty in the same transaction) -------

def test_start_within_tolerance_marks_the_past_minutes_dirty(fleet):
    from gpuquota.outbox.models import DirtyGpuHour

    r = fleet.request(count=2, start=NOW - timedelta(minutes=4))  # NOW is 10:00
    gpu_ids = {a.gpu_id for a in r.assignments.all()}
    dirty = set(DirtyGpuHour.objects.filter(gpu_id__in=gpu_ids).values_list("gpu_id", "hour"))
    assert {(gpu_id, NOW - H) for gpu_id in gpu_ids} <= dirty
