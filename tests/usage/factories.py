"""Hand-built telemetry for usage tests: rows inserted directly (as ingestion does),
with the outbox marks ingestion makes in the same transaction."""

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from accounts.models import ClusterIdentity
from gpuquota.core.timeutil import Period
from gpuquota.ingest.models import GpuEvent, NodeBoot, ProcessRecord, Sample
from gpuquota.inventory.models import Gpu, GpuClass
from gpuquota.inventory.services import gpu_register
from gpuquota.outbox.services import gpu_hours_mark_dirty, gpu_interval_mark_dirty
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.usage.figures import UsageFigures
from gpuquota.usage.selectors import classes_utilization, team_reservations_utilization
from tests.factories import (
    AdminFactory,
    GpuClassFactory,
    MembershipFactory,
    NodeFactory,
    TeamFactory,
    UserFactory,
    make_gpu,
)

T0 = datetime(2026, 10, 31, 22, 0, tzinfo=UTC)  # two hours before a month edge


def at(minutes: float = 0, base: datetime = T0) -> datetime:
    return base + timedelta(seconds=int(minutes * 60))


def _physical(gpu: Gpu) -> int:
    return gpu.parent_id or gpu.id


def node_boot(node, boot_id: str | None) -> NodeBoot | None:
    """The node's boot of that boot_id (as ingestion records it), or None."""
    if boot_id is None:
        return None
    return NodeBoot.objects.get_or_create(node=node, boot_id=boot_id,
                                          defaults={"first_received_at": timezone.now()})[0]


def add_samples(gpu: Gpu, rows: list[dict]) -> None:
    """rows: {start, seconds=60, util, readings=6, boot=None, ...}; stored and marked dirty."""
    now = timezone.now()
    objs = []
    for row in rows:
        start = row.pop("start")
        seconds = row.pop("seconds", 60)
        util = row.pop("util", Decimal("50"))
        objs.append(Sample(
            gpu=gpu, window_start=start, window_end=start + timedelta(seconds=seconds),
            readings=row.pop("readings", 6),
            util_gpu_avg=None if util is None else Decimal(str(util)),
            received_at=row.pop("received_at", now),
            boot=node_boot(gpu.node, row.pop("boot", None)), **row,
        ))
    with transaction.atomic():
        Sample.objects.bulk_create(objs, ignore_conflicts=True)
        gpu_hours_mark_dirty(marks=[(_physical(gpu), o.window_start) for o in objs])


def minute_samples(gpu: Gpu, start: datetime, minutes: int, util=50, **extra) -> None:
    add_samples(gpu, [{"start": start + timedelta(minutes=i), "util": util, **extra}
                      for i in range(minutes)])


def add_processes(gpu: Gpu, start: datetime, minutes: int, *, user: str | None = "alice",
                  uid: int | None = None, pid: int = 100, account: str | None = None,
                  source: str | None = None) -> None:
    """One process per minute window, stored with the sample of that window (the same
    batch: its `received_at`) where there is one."""
    now = timezone.now()
    starts = [start + timedelta(minutes=i) for i in range(minutes)]
    batches = dict(Sample.objects.filter(gpu=gpu, window_start__in=starts)
                   .values_list("window_start", "received_at"))
    objs = [
        ProcessRecord(
            gpu=gpu, window_start=at, window_end=at + timedelta(minutes=1), pid=pid,
            pid_start=1, uid=uid, user=user, command="python",
            job_source=source or ("slurm" if account else "unix"), job_account=account,
            received_at=batches.get(at, now),
        )
        for at in starts
    ]
    with transaction.atomic():
        ProcessRecord.objects.bulk_create(objs)
        gpu_hours_mark_dirty(marks=[(_physical(gpu), o.window_start) for o in objs])


def add_event(gpu: Gpu, ts: datetime, type: str, xid: int | None = None,
              received_at: datetime | None = None, boot: str | None = None) -> GpuEvent:
    with transaction.atomic():
        event = GpuEvent.objects.create(
            event_id=uuid.uuid4(), node=gpu.node, gpu=gpu, ts=ts, type=type, xid=xid,
            received_at=received_at or ts, boot=node_boot(gpu.node, boot),
        )
        gpu_hours_mark_dirty(marks=[(_physical(gpu), ts)])
    return event


def reserve(team, gpu: Gpu, start: datetime, end: datetime, *, approved_at=None,
            status=Reservation.Status.ACTIVE) -> Assignment:
    """A reservation of one GPU with its assignment, created as a backfill would be."""
    with transaction.atomic():
        reservation = Reservation.objects.create(
            team=team, gpu_class=gpu.gpu_class, count=1, start=start, end=end, status=status,
            requested_by=AdminFactory(), requested_at=start, approved_at=approved_at,
            is_backfill=True,
        )
        assignment = Assignment.objects.create(
            reservation=reservation, gpu=gpu, assigned_from=start, assigned_until=end
        )
        gpu_interval_mark_dirty(gpu_ids=[gpu.id], start=start, end=end)
    return assignment


def mig_device(parent: Gpu, index: int) -> Gpu:
    return gpu_register(node=parent.node, uuid="MIG-" + str(uuid.uuid4()),
                        model_name=parent.model_name, at=parent.commissioned_at,
                        parent=parent, index=index)


def team_with_user(slug: str, unix_user: str, cluster, uid: int | None = None):
    """A team whose member runs as `unix_user` on `cluster` (their billing team)."""
    team = TeamFactory(name=slug.title(), slug=slug)
    user = UserFactory(username=f"{slug}-{unix_user}")
    MembershipFactory(user=user, team=team, is_billing=True,
                      valid_from=datetime(2026, 1, 1, tzinfo=UTC))
    ClusterIdentity.objects.create(cluster=cluster, kind=ClusterIdentity.Kind.UNIX_USER,
                                   key=unix_user, user=user,
                                   valid_from=datetime(2026, 1, 1, tzinfo=UTC))
    return team, user


def reservation_figures(reservation: Reservation, period: Period) -> UsageFigures:
    """One reservation's figures, as the team API lists them per reservation."""
    rows = team_reservations_utilization(team=reservation.team, period=period)
    return next((row.figures for row in rows if row.reservation.id == reservation.id),
                UsageFigures())


def class_figures(gpu_class: GpuClass, period: Period) -> UsageFigures:
    """Reserved figures of one class (the class in force then), as the fleet API lists them."""
    figures = dict(classes_utilization(period=period)).get(gpu_class)
    return figures.reserved if figures else UsageFigures()


def mixed_fleet(team, size: int = 1):
    """Per unit of `size`: a GPU reserved by `team` (busy 100 min, then idle), an
    unreserved GPU used by a user of team "ml", and a GPU of class L4 failed half an
    hour; samples from T0 for 2.5 h, rolled up. Returns team "ml"."""
    from gpuquota.inventory.models import GpuHealthInterval
    from gpuquota.usage.sweep import dirty_hours_process

    H, M = timedelta(hours=1), timedelta(minutes=1)
    node = NodeFactory()
    ml = team_with_user("ml", "alice", node.cluster)
    other = GpuClassFactory(name="L4")
    for i in range(size):
        reserved = make_gpu(node=node, index=3 * i, at=T0 - H)
        minute_samples(reserved, T0, 100, util=60)
        minute_samples(reserved, T0 + 100 * M, 50, util=1)
        reserve(team, reserved, T0 + 7 * M + i * M, T0 + 5 * H)
        used = make_gpu(node=node, index=3 * i + 1, at=T0 - H, gpu_class=reserved.gpu_class)
        minute_samples(used, T0, 150, util=30 + i)
        add_processes(used, T0 + 20 * M, 100, user="alice")
        failing = make_gpu(node=node, index=3 * i + 2, at=T0 - H, gpu_class=other)
        minute_samples(failing, T0 + 10 * M, 140, util=90)
        GpuHealthInterval.objects.create(gpu=failing, state="failed", reason="xid 79",
                                         valid_from=T0 + 40 * M, valid_until=T0 + 70 * M)
    dirty_hours_process()
    return ml
