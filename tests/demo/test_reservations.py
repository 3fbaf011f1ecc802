from datetime import UTC, datetime

import pytest

from gpuquota.demo.reservations import demo_reservations_seed
from gpuquota.reservations.models import Reservation
from tests.factories import AdminFactory, GpuClassFactory, NodeFactory, QuotaFactory, make_gpu
from tests.reservations.factories import lead_of

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 1, 10, 30, tzinfo=UTC)


def test_demo_seed_is_idempotent_and_covers_every_kind():
    AdminFactory(username="admin")
    from tests.factories import TeamFactory

    teams = [TeamFactory(name=s.title(), slug=s) for s in ("vision", "speech", "robotics")]
    for team in teams:
        lead_of(team)
    for name in ("H100-80GB", "A100-40GB"):  # no L4: skipped
        gpu_class = GpuClassFactory(name=name)
        node = NodeFactory(hostname=f"{name.lower()}-n0")
        for i in range(8):
            make_gpu(node=node, gpu_class=gpu_class, index=i)
        for team in teams:
            QuotaFactory(team=team, gpu_class=gpu_class, gpus=2)
    demo_reservations_seed(now=NOW)
    statuses = set(Reservation.objects.values_list("status", flat=True))
    assert statuses == {"ended", "active", "scheduled", "pending"}
    assert Reservation.objects.filter(is_backfill=True).exists()
    count = Reservation.objects.count()
    demo_reservations_seed(now=NOW)
    assert Reservation.objects.count() == count


def test_demo_seed_without_anything_does_nothing():
    demo_reservations_seed(now=NOW)
    assert not Reservation.objects.exists()
