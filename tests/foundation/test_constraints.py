"""The database guards the invariants (PostgreSQL exclusion constraints), and
history is never deleted (PROTECT)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from accounts.models import Membership
from gpuquota.core.fields import whole_second
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Quota
from tests.factories import (
    EPOCH,
    GpuClassFactory,
    MembershipFactory,
    QuotaFactory,
    RateCardFactory,
    TeamFactory,
    UserFactory,
    make_gpu,
)

pytestmark = pytest.mark.django_db
DAY = timedelta(days=1)


def refused(callable_):
    with pytest.raises(IntegrityError), transaction.atomic():
        callable_()


@pytest.mark.postgres
def test_overlapping_quotas_of_one_team_and_class_are_refused():
    quota = QuotaFactory(valid_from=EPOCH, valid_until=EPOCH + 10 * DAY)
    refused(
        lambda: QuotaFactory(
            team=quota.team, gpu_class=quota.gpu_class, valid_from=EPOCH + 9 * DAY, valid_until=None
        )
    )
    # An open-ended row overlaps everything after it.
    refused(
        lambda: QuotaFactory(
            team=quota.team,
            gpu_class=quota.gpu_class,
            valid_from=EPOCH - DAY,
            valid_until=EPOCH + DAY,
        )
    )
    # Touching intervals [a,b) and [b,c) do not overlap; another class or team is free.
    QuotaFactory(team=quota.team, gpu_class=quota.gpu_class, valid_from=EPOCH + 10 * DAY)
    QuotaFactory(team=quota.team, gpu_class=GpuClassFactory(name="L4"), valid_from=EPOCH)
    QuotaFactory(team=TeamFactory(), gpu_class=quota.gpu_class, valid_from=EPOCH)
    assert Quota.objects.count() == 4


@pytest.mark.postgres
def test_overlapping_rate_cards_of_one_class_are_refused():
    card = RateCardFactory(valid_from=EPOCH, valid_until=EPOCH + 30 * DAY)
    refused(lambda: RateCardFactory(gpu_class=card.gpu_class, valid_from=EPOCH + 29 * DAY))
    RateCardFactory(
        gpu_class=card.gpu_class, valid_from=EPOCH + 30 * DAY, reserved_rate=Decimal("2.75")
    )
    assert RateCard.objects.count() == 2


@pytest.mark.postgres
def test_a_user_has_at_most_one_billing_team_at_any_instant():
    user = UserFactory()
    MembershipFactory(user=user, is_billing=True, valid_from=EPOCH, valid_until=EPOCH + 10 * DAY)
    refused(lambda: MembershipFactory(user=user, is_billing=True, valid_from=EPOCH + 5 * DAY))
    # Member of several teams at once is fine; only one of them bills.
    MembershipFactory(user=user, is_billing=False, valid_from=EPOCH + 5 * DAY)
    MembershipFactory(user=user, is_billing=True, valid_from=EPOCH + 10 * DAY)
    assert Membership.objects.filter(user=user).count() == 3


@pytest.mark.postgres
def test_one_membership_per_user_and_team_at_a_time():
    membership = MembershipFactory(valid_from=EPOCH)
    refused(
        lambda: MembershipFactory(
            user=membership.user,
            team=membership.team,
            valid_from=EPOCH + DAY,
            role=Membership.Role.LEAD,
        )
    )


@pytest.mark.postgres
def test_overlapping_node_and_class_intervals_of_a_gpu_are_refused():
    gpu = make_gpu()
    refused(lambda: gpu.node_history.create(node=gpu.node, valid_from=EPOCH + DAY))
    refused(lambda: gpu.class_history.create(gpu_class=gpu.gpu_class, valid_from=EPOCH + DAY))


def test_interval_end_must_follow_its_start():
    refused(lambda: QuotaFactory(valid_from=EPOCH, valid_until=EPOCH))


def test_unknown_status_values_are_refused_by_the_database():
    membership = MembershipFactory()
    refused(lambda: Membership.objects.filter(pk=membership.pk).update(role="owner"))


def test_deleting_a_gpu_with_history_is_refused():
    gpu = make_gpu()
    with pytest.raises(ProtectedError):
        gpu.delete()
    with pytest.raises(ProtectedError):
        gpu.node.delete()
    with pytest.raises(ProtectedError):
        gpu.gpu_class.delete()


def test_deleting_a_team_or_user_with_history_is_refused():
    membership = MembershipFactory()
    with pytest.raises(ProtectedError):
        membership.team.delete()
    with pytest.raises(ProtectedError):
        membership.user.delete()


def test_stored_instants_are_whole_seconds_truncated_towards_the_past():
    quota = QuotaFactory(valid_from=EPOCH + timedelta(seconds=5, microseconds=999_999))
    quota.refresh_from_db()
    assert quota.valid_from == EPOCH + timedelta(seconds=5)
    assert whole_second(EPOCH + timedelta(microseconds=1)) == EPOCH
