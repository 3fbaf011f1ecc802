"""Membership and identity changes go through services: checked, audited, and the
usage they re-attribute is marked for recompute in the same transaction."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from accounts.models import ClusterIdentity, Membership
from accounts.services import identity_delete, identity_save, membership_save
from gpuquota.core.models import AuditEntry
from gpuquota.ingest.models import ProcessRecord
from gpuquota.outbox.models import DirtyGpuHour
from tests.factories import (
    EPOCH,
    AdminFactory,
    ClusterIdentityFactory,
    MembershipFactory,
    TeamFactory,
    UserFactory,
    make_gpu,
)

pytestmark = pytest.mark.django_db
WINDOW = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


@pytest.fixture
def process_of_alice():
    gpu = make_gpu()
    ProcessRecord.objects.create(
        gpu=gpu,
        window_start=WINDOW,
        window_end=WINDOW + timedelta(minutes=1),
        pid=42,
        pid_start=1,
        user="alice",
        received_at=WINDOW,
    )
    return gpu


def test_billing_membership_change_marks_the_users_processes_dirty(process_of_alice):
    gpu = process_of_alice
    alice = UserFactory(username="alice-user")
    ClusterIdentityFactory(cluster=gpu.node.cluster, key="alice", user=alice)
    membership = Membership(user=alice, team=TeamFactory(), is_billing=True, valid_from=EPOCH)
    membership_save(membership=membership, actor=AdminFactory())
    assert list(DirtyGpuHour.objects.values_list("gpu_id", "hour")) == [(gpu.id, WINDOW)]
    assert AuditEntry.objects.filter(action="membership.create").exists()


def test_second_billing_team_at_the_same_instant_is_refused_with_a_message():
    user = UserFactory()
    MembershipFactory(user=user, is_billing=True)
    with pytest.raises(ValidationError) as refused:
        membership_save(
            membership=Membership(
                user=user, team=TeamFactory(), is_billing=True, valid_from=EPOCH + timedelta(days=3)
            ),
            actor=AdminFactory(),
        )
    assert "at most one billing team" in str(refused.value)
    assert Membership.objects.filter(user=user).count() == 1


def test_identity_save_and_delete_mark_dirty_and_audit(process_of_alice):
    gpu = process_of_alice
    identity = ClusterIdentity(
        cluster=gpu.node.cluster,
        kind="unix_user",
        key="alice",
        user=UserFactory(),
        valid_from=EPOCH,
    )
    identity_save(identity=identity, actor=AdminFactory())
    assert DirtyGpuHour.objects.filter(gpu=gpu, hour=WINDOW).exists()
    DirtyGpuHour.objects.all().delete()
    identity_delete(identity=identity, actor=AdminFactory())
    assert DirtyGpuHour.objects.filter(gpu=gpu, hour=WINDOW).exists()
    assert AuditEntry.objects.filter(action__startswith="identity.").count() == 2


def test_identity_overlap_is_refused_in_python_too(process_of_alice):
    gpu = process_of_alice
    ClusterIdentityFactory(cluster=gpu.node.cluster, key="alice")
    with pytest.raises(ValidationError):
        identity_save(
            identity=ClusterIdentity(
                cluster=gpu.node.cluster,
                kind="unix_user",
                key="alice",
                user=UserFactory(),
                valid_from=EPOCH + timedelta(days=1),
            ),
            actor=AdminFactory(),
        )


def test_admin_membership_form_goes_through_the_service(client, process_of_alice):
    gpu = process_of_alice
    alice = UserFactory(username="alice-user")
    ClusterIdentityFactory(cluster=gpu.node.cluster, key="alice", user=alice)
    team = TeamFactory()
    client.force_login(AdminFactory())
    response = client.post(
        reverse("admin:accounts_membership_add"),
        {
            "user": alice.pk,
            "team": team.pk,
            "role": "member",
            "is_billing": "on",
            "valid_from_0": "2026-01-01",
            "valid_from_1": "00:00:00",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    assert DirtyGpuHour.objects.filter(gpu=gpu).exists()
    assert AuditEntry.objects.filter(action="membership.create", team=team).exists()
