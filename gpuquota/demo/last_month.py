"""Last month for the statements demo, whatever today's date: reservations recorded by
the admin (backfill), telemetry of every reserved GPU stored by the real ingestion service
(`telemetry.py`: a GPU of a reservation lost with XID 79 and back after a reboot, a node
whose agent was away for hours; unreserved busy GPUs used by mapped people and a Slurm
account), rolled up; `reports` then drafts last month's statements from them (its
`DEMO_SEEDS`), so the review page shows reserved, failure-credit and on-demand lines with
real utilization and coverage, one team flagged. Idempotent: reservations are recognised
by purpose, batches by a batch id derived from their content's place."""

import logging
import uuid
from datetime import UTC, datetime, timedelta

from accounts.models import Team, User
from gpuquota.core.errors import DomainError
from gpuquota.core.timeutil import Period
from gpuquota.demo.telemetry import (
    BATCH_NAMESPACE,
    Gap,
    ingest,
    iso,
    process,
    reserved_telemetry_seed,
    sample,
    windows,
)
from gpuquota.demo.usage import demo_usage_catch_up
from gpuquota.inventory.models import Gpu, GpuClass
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.reservations.services import reservation_create

logger = logging.getLogger(__name__)
DAY, HOUR = timedelta(days=1), timedelta(hours=1)

# (team, class, count, first day, last day (exclusive), purpose): days of last month, kept
# short because every reserved GPU-hour is one more hour to send and sweep at seed
PLAN = [
    ("vision", "H100-80GB", 2, 8, 11, "[demo] last month: detector training"),
    ("speech", "A100-40GB", 2, 9, 10, "[demo] last month: ASR training"),
    ("robotics", "L4", 1, 9, 10, "[demo] last month: sim rendering"),
    ("nlp", "H100-80GB", 1, 9, 10, "[demo] last month: eval harness"),
]
FAILURE_DAY, FAILED_AT_H, BACK_AT_H = 9, 9, 12  # lost 09:00, a good sample after reboot 12:00
AGENT_AWAY_H = (8, 14)  # robotics' agent away for an upgrade, that day
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


def _first_gpu(purpose: str) -> Gpu | None:
    assignment = (Assignment.objects.filter(reservation__purpose=purpose)
                  .select_related("gpu__node").order_by("gpu_id").first())
    return assignment.gpu if assignment else None


def _incidents(day: datetime) -> dict[int, list[Gap]]:
    """The first GPU of vision's reservation falls off the bus at 09:00 (XID 79); after a
    reboot of its node it reports again at 12:00: the failed hours are credited. Robotics'
    node loses its agent for an upgrade from 08:00 to 14:00 (the GPU kept working, nobody
    saw it): its coverage falls under 90 % and the review flags it. The gaps, by GPU."""
    gaps: dict[int, list[Gap]] = {}
    gpu = _first_gpu(PLAN[0][5])
    if gpu is not None:
        lost, back = day + FAILED_AT_H * HOUR, day + BACK_AT_H * HOUR
        ingest(gpu, f"{day:%Y-%m}-xid", "demo-boot-a", lost + timedelta(minutes=1),
               events=[{"event_id": str(uuid.uuid5(BATCH_NAMESPACE, f"{gpu.uuid}:{day}:xid")),
                        "gpu_uuid": gpu.uuid, "ts": iso(lost), "type": "xid", "xid": 79,
                        "detail": "GPU has fallen off the bus"}])
        gaps[gpu.id] = [Gap(lost, back, boot_after="demo-boot-b")]
    rendering = _first_gpu(PLAN[2][5])
    if rendering is not None:
        gaps[rendering.id] = [Gap(day + AGENT_AWAY_H[0] * HOUR, day + AGENT_AWAY_H[1] * HOUR)]
    return gaps


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
            starts = windows(start, end)
            ingest(gpu, f"{day:%Y-%m}-on-demand", "demo-boot-a", end,
                   samples=[sample(gpu, w, 75.0) for w in starts],
                   processes=[process(gpu, w, user, account) for w in starts])


def demo_last_month_seed(*, now: datetime, until: datetime | None = None) -> None:
    """Last month's reservations, and the telemetry of every demo reservation from the
    start of last month to `until` (default now; where the back-filled history begins),
    rolled up (idempotent)."""
    admin = User.objects.filter(is_staff=True, is_active=True).order_by("id").first()
    if admin is None:
        return
    before = now.astimezone(UTC).date().replace(day=1) - DAY
    period = Period.month(before.year, before.month)
    _reservations(period, admin, now)
    day = period.start + (FAILURE_DAY - 1) * DAY
    gaps = _incidents(day)
    reserved_telemetry_seed(since=period.start, until=until or now, gaps=gaps)
    _on_demand(day)
    demo_usage_catch_up()
    demo_usage_catch_up()  # the hours a closed failed interval marked
