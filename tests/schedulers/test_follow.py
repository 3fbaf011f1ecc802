"""The scheduler follows every reservation and quota change: the services ask for a
reconcile once their transaction commits (tasks run in process here, as on the embedded
default), so a reservation made in the web UI reaches the cluster without waiting for beat."""

from datetime import timedelta

import pytest
import time_machine

from gpuquota.reservations.quotas import quota_create
from gpuquota.reservations.services import reservation_cancel, reservation_create
from gpuquota.reservations.services_change import reservation_extend
from tests.schedulers import backend_memory as mem
from tests.schedulers.conftest import NOW

pytestmark = pytest.mark.django_db(transaction=True)


@time_machine.travel(NOW, tick=False)
def test_a_reservation_reaches_the_scheduler_at_once_and_leaves_it_when_cancelled(memory):
    vision = memory.teams["vision"]
    lead = vision.memberships.get().user
    quota_create(team=vision, gpu_class=memory.gpu_class, gpus=4, valid_from=NOW,
                 valid_until=None, by=memory.admin)
    assert ("account", "gq-vision") in mem.STORE  # the quota's reconcile ran

    reservation = reservation_create(team=vision, gpu_class=memory.gpu_class, count=2,
                                     start=NOW + timedelta(minutes=10),
                                     end=NOW + timedelta(hours=3), requested_by=lead, now=NOW)
    hold = ("hold", f"gq-res-{reservation.pk}")
    assert mem.STORE[hold] == {"gpus": "2"}

    reservation_extend(reservation=reservation, end=NOW + timedelta(hours=5), actor=lead,
                       now=NOW)
    assert mem.STORE[hold] == {"gpus": "2"}  # still held, nothing else to change

    reservation_cancel(reservation=reservation, actor=lead, now=NOW)
    assert hold not in mem.STORE
