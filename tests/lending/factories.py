"""A small fleet for lending tests: one cluster without a scheduler backend (loans are
advisory, the samples say when a GPU is free), a reserving team (Vision) and two borrowing
teams (Speech, Audio) whose unix users map to them, reservations made by the real
services, samples and processes stored as ingestion stores them."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import transaction

from accounts.models import ClusterIdentity, Membership, Team, User
from gpuquota.ingest.models import ProcessRecord, Sample
from gpuquota.inventory.models import Cluster, Gpu, GpuClass
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import reservation_create
from tests.factories import (
    AdminFactory,
    ClusterFactory,
    ClusterIdentityFactory,
    GpuClassFactory,
    MembershipFactory,
    NodeFactory,
    QuotaFactory,
    TeamFactory,
    UserFactory,
    make_gpu,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
IDLE = timedelta(minutes=30)  # LEND_AFTER_IDLE_S in these tests
DAY = timedelta(days=1)
OWNER_USER, BORROWER_USER, AUDIO_USER, STRANGER = "vera", "sam", "ada", "nobody"


@dataclass
class World:
    cluster: Cluster
    gpu_class: GpuClass
    gpus: list[Gpu]
    team: Team
    other_team: Team
    audio: Team
    admin: User
    lead: User
    other_lead: User
    audio_lead: User
    member: User
    outsider: User

    @classmethod
    def create(cls, *, gpus: int = 4, scheduler: str = Cluster.Scheduler.NONE) -> "World":
        cluster = ClusterFactory(name="Lab", slug="lab", scheduler=scheduler)
        gpu_class = GpuClassFactory(name="H100-80GB")
        node = NodeFactory(cluster=cluster, hostname="h100-node-00")
        fleet = [make_gpu(node=node, gpu_class=gpu_class, index=i) for i in range(gpus)]
        team = TeamFactory(name="Vision", slug="vision")
        other = TeamFactory(name="Speech", slug="speech")
        audio = TeamFactory(name="Audio <&>", slug="audio")
        QuotaFactory(team=team, gpu_class=gpu_class, gpus=4)
        lead, member = UserFactory(username="lead"), UserFactory(username="member")
        other_lead, audio_lead = UserFactory(username="other_lead"), UserFactory(username="al")
        MembershipFactory(user=lead, team=team, role=Membership.Role.LEAD)
        MembershipFactory(user=member, team=team, is_billing=True)
        MembershipFactory(user=other_lead, team=other, role=Membership.Role.LEAD,
                          is_billing=True)
        MembershipFactory(user=audio_lead, team=audio, role=Membership.Role.LEAD,
                          is_billing=True)
        for key, user in ((OWNER_USER, member), (BORROWER_USER, other_lead),
                          (AUDIO_USER, audio_lead)):
            ClusterIdentityFactory(cluster=cluster, kind=ClusterIdentity.Kind.UNIX_USER,
                                   key=key, user=user)
        return cls(cluster=cluster, gpu_class=gpu_class, gpus=fleet, team=team,
                   other_team=other, audio=audio, admin=AdminFactory(username="admin"),
                   lead=lead, other_lead=other_lead, audio_lead=audio_lead, member=member,
                   outsider=UserFactory(username="outsider"))

    def reserve(self, *, count: int = 2, team: Team | None = None,
                start: datetime = NOW - 2 * DAY, end: datetime = NOW + 2 * DAY
                ) -> Reservation:
        """A reservation that began in the past, as an admin records it (backfill)."""
        return reservation_create(team=team or self.team, gpu_class=self.gpu_class,
                                  count=count, start=start, end=end, requested_by=self.admin,
                                  now=start)


def held_gpus(reservation: Reservation) -> list[Gpu]:
    return [a.gpu for a in reservation.assignments.select_related("gpu").order_by("gpu_id")]


def samples(gpu: Gpu, *, start: datetime, end: datetime, util: float = 0,
            users: tuple[str, ...] = (), window_s: int = 60) -> None:
    """One sample per `window_s` over [start, end) at `util` %, with one process of each
    unix user of `users` in every window."""
    rows, procs = [], []
    for i in range(int((end - start).total_seconds()) // window_s):
        ws = start + timedelta(seconds=i * window_s)
        we = ws + timedelta(seconds=window_s)
        rows.append(Sample(gpu=gpu, window_start=ws, window_end=we, readings=6,
                           util_gpu_avg=Decimal(str(util)), received_at=we))
        procs += [ProcessRecord(gpu=gpu, window_start=ws, window_end=we, pid=1000 + n,
                                pid_start=1, user=user, command="python", job_source="unix",
                                received_at=we) for n, user in enumerate(users)]
    with transaction.atomic():
        Sample.objects.bulk_create(rows, ignore_conflicts=True)
        ProcessRecord.objects.bulk_create(procs, ignore_conflicts=True)
