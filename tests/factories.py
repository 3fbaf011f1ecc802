"""factory_boy factories for the foundation's models; each area adds its own module."""

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import factory
from django.contrib.auth.models import AnonymousUser

from accounts.models import ClusterIdentity, Membership, Team, User
from gpuquota.inventory.models import Cluster, Gpu, GpuClass, GpuModelMapping, Node
from gpuquota.inventory.services import gpu_register
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Quota

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.django.Password("password")


class AdminFactory(UserFactory):
    username = factory.Sequence(lambda n: f"admin{n}")
    is_staff = True
    is_superuser = True


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"Team {n}")
    slug = factory.Sequence(lambda n: f"team-{n}")
    cost_center = factory.Sequence(lambda n: f"CC-{1000 + n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Membership.Role.MEMBER
    valid_from = EPOCH


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"Cluster {n}")
    slug = factory.Sequence(lambda n: f"cluster-{n}")
    scheduler = Cluster.Scheduler.SLURM


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    cluster = factory.SubFactory(ClusterFactory)
    hostname = factory.Sequence(lambda n: f"gpu-node-{n:02d}")


class GpuClassFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuClass
        django_get_or_create = ("name",)

    name = "H100-80GB"


def gpu_uuid() -> str:
    return "GPU-" + str(uuid.uuid4())


def make_gpu(
    *,
    node: Node | None = None,
    gpu_class: GpuClass | None = None,
    index: int = 0,
    at: datetime = EPOCH,
    uuid_: str | None = None,
) -> Gpu:
    """A physical GPU registered through the inventory service (with its intervals)."""
    gpu_class = gpu_class or GpuClassFactory()
    model_name = f"NVIDIA {gpu_class.name}"
    GpuModelMapping.objects.get_or_create(model_name=model_name, defaults={"gpu_class": gpu_class})
    return gpu_register(
        node=node or NodeFactory(),
        uuid=uuid_ or gpu_uuid(),
        model_name=model_name,
        at=at,
        index=index,
    )


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    team = factory.SubFactory(TeamFactory)
    gpu_class = factory.SubFactory(GpuClassFactory)
    gpus = 4
    valid_from = EPOCH


class RateCardFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RateCard

    gpu_class = factory.SubFactory(GpuClassFactory)
    valid_from = EPOCH
    reserved_rate = Decimal("2.50")
    on_demand_rate = Decimal("3.00")
    borrowed_rate = Decimal("1.50")
    currency = "USD"


class ClusterIdentityFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ClusterIdentity

    cluster = factory.SubFactory(ClusterFactory)
    kind = ClusterIdentity.Kind.UNIX_USER
    key = factory.Sequence(lambda n: f"unix{n}")
    user = factory.SubFactory(UserFactory)
    valid_from = EPOCH


@dataclass
class RoleMatrix:
    """One user per role, around `team` (and `other_team`, led by `other_lead`)."""

    team: Team
    other_team: Team
    admin: User
    lead: User
    other_lead: User
    member: User
    outsider: User
    anonymous: AnonymousUser
    finance: User | None = None

    @classmethod
    def create(cls) -> "RoleMatrix":
        team = TeamFactory(name="Vision", slug="vision")
        other_team = TeamFactory(name="Speech", slug="speech")
        lead = UserFactory(username="lead")
        other_lead = UserFactory(username="other_lead")
        member = UserFactory(username="member")
        MembershipFactory(user=lead, team=team, role=Membership.Role.LEAD, is_billing=True)
        MembershipFactory(user=member, team=team, role=Membership.Role.MEMBER, is_billing=True)
        MembershipFactory(user=other_lead, team=other_team, role=Membership.Role.LEAD)
        return cls(
            team=team,
            other_team=other_team,
            admin=AdminFactory(username="admin"),
            lead=lead,
            other_lead=other_lead,
            member=member,
            outsider=UserFactory(username="outsider"),
            anonymous=AnonymousUser(),
            finance=UserFactory(username="finance", is_finance=True),
        )

    def users(self) -> dict:
        return {
            "admin": self.admin,
            "lead": self.lead,
            "other_lead": self.other_lead,
            "member": self.member,
            "outsider": self.outsider,
            "anonymous": self.anonymous,
            "finance": self.finance,
        }
