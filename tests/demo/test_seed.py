import pytest
from django.core.management import call_command

from accounts.models import ClusterIdentity, Membership, Team, User
from gpuquota.inventory.models import Cluster, Gpu, GpuClass, Node
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Quota, Reservation

pytestmark = pytest.mark.django_db

MODELS = [
    User,
    Team,
    Membership,
    ClusterIdentity,
    Cluster,
    Node,
    GpuClass,
    Gpu,
    Quota,
    RateCard,
    Reservation,
]


def test_seed_demo_builds_the_organisation_and_is_idempotent(capsys):
    call_command("seed_demo", history_hours=0)
    counts = {model.__name__: model.objects.count() for model in MODELS}
    assert counts["Cluster"] == 2
    assert counts["Node"] == 12
    assert counts["Gpu"] == 96
    assert counts["GpuClass"] == 3
    assert counts["Team"] == 4
    assert Membership.objects.filter(role="lead").count() == 4
    assert counts["Reservation"] >= 4
    assert Reservation.objects.filter(status="pending").exists()
    assert "vision-lead" in capsys.readouterr().out
    call_command("seed_demo", history_hours=0)
    assert {model.__name__: model.objects.count() for model in MODELS} == counts
