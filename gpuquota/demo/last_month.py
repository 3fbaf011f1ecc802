"""Last month for the statements demo, whatever today's date: reservations recorded by
the admin (backfill), a few hours of telemetry stored by the real ingestion service (a GPU
of a reservation lost with XID 79 and back after a reboot, unreserved busy GPUs used by
mapped people and a Slurm account), rolled up; `reports` then drafts last month's statements
from them (its `DEMO_SEEDS`), so the review page shows reserved, failure-credit and
on-demand lines at once. Idempotent: reservations are recognised by purpose, batches by a
batch id derived from their content's place."""

import logging
import uuid
from datetime import UTC, datetime, timedelta

from accounts.models import Team, User
from gpuquota.core.errors import DomainError
from gpuquota.core.timeutil import Period
from gpuquota.demo.usage import demo_usage_catch_up
from gpuquota.ingest.batches import batch_ingest
from gpuquota.ingest.protocol import batch_check
from gpuquota.inventory.models import Gpu, GpuClass
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.reservations.services import reservation_create

logger = logging.getLogger(__name__)
DAY, HOUR, WINDOW = timedelta(days=1), timedelta(hours=1), timedelta(seconds=600)
BATCH_NAMESPACE = uuid.UUID("6f1d3c9e-5b7a-4e2c-9a41-2d7c1e0b8f53")

# (team, class, count, first day, last day (exclusive), purpose): days of last month, kept
# short because every reserved GPU-hour is one more hour for the rollups to sweep at seed
PLAN = [
    ("vision", "H100-80GB", 2, 8, 11, "[demo] last month: detector training"),
    ("speech", "A100-40GB", 2, 9, 10, "[demo] last month: ASR training"),
    ("robotics", "L4", 1, 9, 10, "[demo] last month: sim rendering"),
    ("nlp", "H100-80GB", 1, 9, 10, "[demo] last month: eval harness"),
]
FAILURE_DAY, FAILED_AT_H, BACK_AT_H = 9, 9, 12  # lost 09:00, a good sample after reboot 12:00
ON_DEMAND_H = (10, 14)  # unreserved busy hours on FAILURE_DAY
# (class, unix user, Slurm account or None): who runs on the unreserved GPUs
ON_DEMAND = [("A100-40GB", "alice", None), ("A100-40GB", "bruno", None),
             ("A100-40GB", "arjun", "speech")]


def _reservations(period: Period, admin: User, now: datetime) -> None:
    teams = {t.slug: t for t in Team.objects.filter(slug__in={p[0] for p in PLAN})}
    classes = {c.name: c for c in GpuClass.objects.all()}
    for slug, class_name, count, first, last, purpose in PLAN:
        team, gpu_class = teams.get(slug), classes.get(class_name)
        if team is None or gpu_class is None or Reservation.objects.filter(
                team=team, purpose=purpose).exists():
            continue
        try:
            reservation_create(team=team, gpu_class=gpu_class, count=count,
                               start=period.start + (first - 1) * DAY,
                               end=period.start + (last - 1) * DAY, requested_by=admin,
                               purpose=purpose, now=now)
        except DomainError as exc:
            logger.info("demo reservation %r skipped: %s", purpose, exc.message)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _sample(gpu: Gpu, start: datetime, util: float) -> dict:
    return {"seq": 1, "gpu_uuid": gpu.uuid, "window_start": _iso(start),
            "window_end": _iso(start + WINDOW), "readings": 10, "util_gpu_avg": util,
            "util_gpu_max": min(100.0, util + 5), "memory_used_bytes_avg": 30 * 2**30,
            "memory_used_bytes_max": 32 * 2**30, "ecc_uncorrected": 0, "ecc_corrected": 0}


def _process(gpu: Gpu, start: datetime, user: str, account: str | None) -> dict:
    job = ({"source": "slurm", "id": "424242", "account": account} if account
           else {"source": "unix"})
    return {"gpu_uuid": gpu.uuid, "window_start": _iso(start), "window_end": _iso(start + WINDOW),
            "pid": 4242, "pid_start": 1, "uid": 1000, "user": user, "command": "python",
            "job": job, "memory_used_bytes_max": 30 * 2**30}


def _windows(start: datetime, end: datetime) -> list[datetime]:
    return [start + i * WINDOW for i in range(int((end - start) / WINDOW))]


def _ingest(gpu: Gpu, label: str, boot_id: str, sent_at: datetime, *, samples=(),
            processes=(), events=()) -> None:
    """One batch from the GPU's node, as its agent would send it, stored by ingestion."""
    body = {"schema_version": 1, "sent_at": _iso(sent_at),
            "batch_id": str(uuid.uuid5(BATCH_NAMESPACE, f"{gpu.uuid}:{label}")),
            "agent_instance_id": str(uuid.uuid5(BATCH_NAMESPACE, f"{gpu.node_id}:{boot_id}")),
            "seq_first": 1, "seq_last": 1,
            "node": {"hostname": gpu.node.hostname, "agent_version": "demo",
                     "boot_id": boot_id, "spool_backlog": 0, "dropped_records_total": 0},
            "gpus": [], "samples": list(samples), "processes": list(processes),
            "events": list(events)}
    batch_ingest(node=gpu.node, body=batch_check(body), now=sent_at, check_age=False)


def _failure_and_reboot(day: datetime) -> None:
    """The first GPU of vision's reservation falls off the bus at 09:00; after a reboot
    of its node it reports again at 12:00: the failed hours are credited."""
    assignment = (Assignment.objects.filter(reservation__purpose=PLAN[0][5])
                  .select_related("gpu__node").order_by("gpu_id").first())
    if assignment is None:
        return
    gpu = assignment.gpu
    lost, back = day + FAILED_AT_H * HOUR, day + BACK_AT_H * HOUR
    before = _windows(lost - 3 * HOUR, lost)
    _ingest(gpu, f"{day:%Y-%m}-before", "demo-boot-a", lost + timedelta(minutes=1),
            samples=[_sample(gpu, w, 92.0) for w in before],
            processes=[_process(gpu, w, "alice", "vision") for w in before],
            events=[{"event_id": str(uuid.uuid5(BATCH_NAMESPACE, f"{gpu.uuid}:{day}:xid")),
                     "gpu_uuid": gpu.uuid, "ts": _iso(lost), "type": "xid", "xid": 79,
                     "detail": "GPU has fallen off the bus"}])
    after = _windows(back, back + 2 * HOUR)
    _ingest(gpu, f"{day:%Y-%m}-after", "demo-boot-b", back + 2 * HOUR,
            samples=[_sample(gpu, w, 88.0) for w in after],
            processes=[_process(gpu, w, "alice", "vision") for w in after])


def _on_demand(day: datetime) -> None:
    """Unreserved GPUs busy for a few hours, run by mapped people (one under a Slurm
    account, which decides its team)."""
    start, end = day + ON_DEMAND_H[0] * HOUR, day + ON_DEMAND_H[1] * HOUR
    busy = set(Assignment.objects.filter(assigned_from__lt=end, assigned_until__gt=start)
               .values_list("gpu_id", flat=True))
    for class_name in {c for c, _, _ in ON_DEMAND}:
        free = [g for g in Gpu.objects.filter(gpu_class__name=class_name, parent__isnull=True)
                .select_related("node").order_by("-id") if g.id not in busy]
        runners = [(u, a) for c, u, a in ON_DEMAND if c == class_name]
        for gpu, (user, account) in zip(free, runners, strict=False):
            windows = _windows(start, end)
            _ingest(gpu, f"{day:%Y-%m}-on-demand", "demo-boot-a", end,
                    samples=[_sample(gpu, w, 75.0) for w in windows],
                    processes=[_process(gpu, w, user, account) for w in windows])


def demo_last_month_seed(*, now: datetime) -> None:
    """Last month's reservations and telemetry, rolled up (idempotent)."""
    admin = User.objects.filter(is_staff=True, is_active=True).order_by("id").first()
    if admin is None:
        return
    before = now.astimezone(UTC).date().replace(day=1) - DAY
    period = Period.month(before.year, before.month)
    _reservations(period, admin, now)
    day = period.start + (FAILURE_DAY - 1) * DAY
    _failure_and_reboot(day)
    _on_demand(day)
    demo_usage_catch_up()
    demo_usage_catch_up()  # the hours a closed failed interval marked
