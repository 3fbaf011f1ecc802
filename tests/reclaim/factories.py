"""A small fleet with telemetry for reclaim tests: reservations made by the real
services (an admin's backfill), samples bulk-inserted as ingestion stores them,
rollups computed by the real outbox sweep."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from accounts.models import Membership, Team, User
from gpuquota.ingest.models import ProcessRecord, Sample
from gpuquota.inventory.models import Gpu, GpuClass
from gpuquota.outbox.services import gpu_hours_mark_dirty
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import reservation_create
from gpuquota.usage.sweep import dirty_hours_process
from reclaim.models import Recommendation, RecommendationGpu
from tests.factories import (
    AdminFactory,
    GpuClassFactory,
    MembershipFactory,
    NodeFactory,
    QuotaFactory,
    RateCardFactory,
    TeamFactory,
    UserFactory,
    make_gpu,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # a whole hour: the evaluation's instant
DAY = timedelta(days=1)
GIB = 2**30


@dataclass
class World:
    gpu_class: GpuClass
    gpus: list[Gpu]
    team: Team
    other_team: Team
    admin: User
    lead: User
    other_lead: User
    member: User
    outsider: User

    @classmethod
    def create(cls, *, gpus: int = 8, rate: str = "2.50") -> "World":
        gpu_class = GpuClassFactory(name="H100-80GB")
        node = NodeFactory(hostname="h100-node-00")
        fleet = [make_gpu(node=node, gpu_class=gpu_class, index=i) for i in range(gpus)]
        team = TeamFactory(name="Vision", slug="vision")
        other = TeamFactory(name="Speech", slug="speech")
        QuotaFactory(team=team, gpu_class=gpu_class, gpus=4)
        QuotaFactory(team=other, gpu_class=gpu_class, gpus=4)
        if rate:
            RateCardFactory(gpu_class=gpu_class, reserved_rate=Decimal(rate))
        lead, other_lead = UserFactory(username="lead"), UserFactory(username="other_lead")
        member = UserFactory(username="member")
        MembershipFactory(user=lead, team=team, role=Membership.Role.LEAD)
        MembershipFactory(user=member, team=team)
        MembershipFactory(user=other_lead, team=other, role=Membership.Role.LEAD)
        return cls(gpu_class=gpu_class, gpus=fleet, team=team, other_team=other,
                   admin=AdminFactory(username="admin"), lead=lead, other_lead=other_lead,
                   member=member, outsider=UserFactory(username="outsider"))

    def reserve(self, *, count: int, team: Team | None = None, start: datetime = NOW - 2 * DAY,
                end: datetime = NOW + 2 * DAY, now: datetime = NOW) -> Reservation:
        """A reservation that began in the past, as an admin records it (backfill)."""
        return reservation_create(team=team or self.team, gpu_class=self.gpu_class,
                                  count=count, start=start, end=end, requested_by=self.admin,
                                  now=now)


def make_rec(world, *, status="open", kind="reclaim", count=2, gpus=1, **fields):
    """A recommendation on a fresh reservation of the team, as the evaluation leaves it."""
    now = timezone.now().replace(microsecond=0)
    reservation = world.reserve(count=count, start=now - timedelta(days=2),
                                end=now + timedelta(days=2), now=now)
    rec = Recommendation.objects.create(
        reservation=reservation, kind=kind, status=status, window_start=now - timedelta(days=1),
        window_end=now, evaluated_at=now, created_at=now, updated_at=now,
        evidence={"gpus": {}}, savings="120.00", currency="USD",
        target_count=1 if kind == "right_size" else None, **fields)
    for gpu in held_gpus(reservation)[:gpus]:
        RecommendationGpu.objects.create(recommendation=rec, gpu=gpu)
    return rec


def held_gpus(reservation: Reservation) -> list[Gpu]:
    return [a.gpu for a in reservation.assignments.select_related("gpu").order_by("gpu_id")]


def telemetry(gpu: Gpu, *, start: datetime, end: datetime, util: Callable[[int], float] | float,
              window_s: int = 60, memory: int | None = None, user: str | None = None) -> None:
    """Samples of `window_s` over [start, end); `util(i)` for the i-th window (or a
    constant); a process of `user` in every window when given."""
    fn = util if callable(util) else (lambda _i: util)
    samples, procs = [], []
    n = int((end - start).total_seconds()) // window_s
    for i in range(n):
        ws = start + timedelta(seconds=i * window_s)
        we = ws + timedelta(seconds=window_s)
        samples.append(Sample(gpu=gpu, window_start=ws, window_end=we, readings=6,
                              util_gpu_avg=Decimal(str(fn(i))), memory_used_bytes_max=memory,
                              received_at=we))
        if user:
            procs.append(ProcessRecord(gpu=gpu, window_start=ws, window_end=we, pid=4242,
                                       pid_start=1, user=user, command="python",
                                       job_source="unix", memory_used_bytes_max=memory,
                                       received_at=we))
    with transaction.atomic():
        Sample.objects.bulk_create(samples, batch_size=5000, ignore_conflicts=True)
        ProcessRecord.objects.bulk_create(procs, batch_size=5000, ignore_conflicts=True)
        gpu_hours_mark_dirty(marks=[(gpu.id, s.window_start) for s in samples[::max(
            1, 3600 // window_s)]] + [(gpu.id, samples[-1].window_start)] if samples else [])


def busy_in(slots: Iterable[range]) -> Callable[[int], float]:
    """util(i): 80 % in the listed minute ranges, 0 elsewhere."""
    ranges = list(slots)
    return lambda i: 80 if any(i in r for r in ranges) else 0


def rollup() -> None:
    """The outbox sweep, as the Celery beat runs it, until nothing is dirty."""
    while dirty_hours_process(limit=10_000):
        pass
