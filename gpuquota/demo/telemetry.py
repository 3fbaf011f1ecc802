"""What the demo's reserved GPUs did before the back-filled history: one 600 s window per
GPU at a time, from the start of last month to where the history begins, sent as each
node's agent would (a batch per GPU and day), stored by the real ingestion service and
rolled up by the real sweep. So last month's statements show real utilization and
coverage, not "coverage under 90 %" everywhere.

Each team works its own way (training near full, rendering in bursts, an evaluation
harness that waits between runs); two things went wrong last month, and show: a GPU of
Vision fell off the bus (its failed hours are credited) and Robotics' node lost its agent
for six hours during an upgrade, so Robotics is flagged for coverage under 90 %.
Idempotent: batch ids come from the GPU and the day."""

import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpuquota.ingest.batches import batch_ingest
from gpuquota.ingest.protocol import batch_check
from gpuquota.inventory.models import Cluster, Gpu
from gpuquota.reservations.models import Assignment

BATCH_NAMESPACE = uuid.UUID("6f1d3c9e-5b7a-4e2c-9a41-2d7c1e0b8f53")
WINDOW = timedelta(seconds=600)
DAY, HOUR = timedelta(days=1), timedelta(hours=1)
GIB = 2**30
# A GPU's draw idle and at full load, by model (the demo's energy counters grow with it)
DRAW_W = {"H100": (70.0, 600.0), "A100": (50.0, 330.0), "L4": (16.0, 70.0)}
# Who runs on a team's reserved GPUs (a demo person, the unix user of their processes).
RUNNER = {"vision": "alice", "speech": "bruno", "robotics": "chen", "nlp": "dmitri"}


def iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def windows(start: datetime, end: datetime) -> list[datetime]:
    """The starts of the whole 600 s windows in [start, end), aligned to the hour."""
    first = start + (-(start - start.replace(minute=0, second=0)) % WINDOW)
    return [first + i * WINDOW for i in range(int((end - first) / WINDOW))] if end > first \
        else []


def sample(gpu: Gpu, start: datetime, util: float, memory_gib: float = 30) -> dict:
    idle_w, full_w = next((watts for name, watts in DRAW_W.items() if name in gpu.model_name),
                          DRAW_W["H100"])
    power_w = round(idle_w + (full_w - idle_w) * util / 100, 1)  # the energy counter's growth
    return {"seq": 1, "gpu_uuid": gpu.uuid, "window_start": iso(start),
            "window_end": iso(start + WINDOW), "readings": 10, "util_gpu_avg": util,
            "power_w_avg": power_w, "energy_j": power_w * WINDOW.total_seconds(),
            "util_gpu_max": min(100.0, util + 5), "memory_used_bytes_avg": int(memory_gib * GIB),
            "memory_used_bytes_max": int((memory_gib + 2) * GIB), "ecc_uncorrected": 0,
            "ecc_corrected": 0}


def process(gpu: Gpu, start: datetime, user: str, account: str | None,
            memory_gib: float = 30) -> dict:
    job = ({"source": "slurm", "id": "424242", "account": account} if account
           else {"source": "unix"})
    return {"gpu_uuid": gpu.uuid, "window_start": iso(start), "window_end": iso(start + WINDOW),
            "pid": 4242, "pid_start": 1, "uid": 1000, "user": user, "command": "python",
            "job": job, "memory_used_bytes_max": int(memory_gib * GIB)}


def ingest(gpu: Gpu, label: str, boot_id: str, sent_at: datetime, *, samples=(),
           processes=(), events=()) -> None:
    """One batch from the GPU's node, as its agent would send it, stored by ingestion."""
    body = {"schema_version": 1, "sent_at": iso(sent_at),
            "batch_id": str(uuid.uuid5(BATCH_NAMESPACE, f"{gpu.uuid}:{label}")),
            "agent_instance_id": str(uuid.uuid5(BATCH_NAMESPACE, f"{gpu.node_id}:{boot_id}")),
            "seq_first": 1, "seq_last": 1,
            "node": {"hostname": gpu.node.hostname, "agent_version": "demo",
                     "boot_id": boot_id, "spool_backlog": 0, "dropped_records_total": 0},
            "gpus": [], "samples": list(samples), "processes": list(processes),
            "events": list(events)}
    batch_ingest(node=gpu.node, body=batch_check(body), now=sent_at, check_age=False)


def _util(team: str, rng: random.Random, at: datetime) -> float:
    """A window's mean utilization by the team's kind of work."""
    minute = at.hour * 60 + at.minute
    if team == "vision":  # training runs, an evaluation every 4 h, nothing queued at night
        if 2 <= at.hour < 4:
            return 0.0
        return 25.0 if minute % 240 < 20 else rng.uniform(86, 97)
    if team == "speech":  # training, stalled on data loading now and then
        return rng.uniform(0, 3) if rng.random() < 0.12 else rng.uniform(72, 90)
    if team == "robotics":  # rendering in bursts
        return rng.uniform(20, 70)
    return rng.uniform(80, 92) if minute % 70 < 50 else 0.0  # an eval harness between runs


@dataclass(frozen=True)
class Gap:
    """Time a GPU did not report: `boot_after` names the boot it reports from afterwards
    (a reboot), or None (the agent was away, the node kept running)."""

    start: datetime
    end: datetime
    boot_after: str | None = None


def _segments(start: datetime, end: datetime, gaps: list[Gap]) -> list[tuple]:
    """[(start, end, boot id)] of the time a GPU reported: around its gaps, with the boot
    it was on."""
    segments, boot, at = [], "demo-boot-a", start
    for gap in sorted(g for g in gaps if g.start < end and g.end > start):
        if gap.start > at:
            segments.append((at, gap.start, boot))
        at, boot = max(at, gap.end), gap.boot_after or boot
    if at < end:
        segments.append((at, end, boot))
    return segments


def reserved_telemetry_seed(*, since: datetime, until: datetime,
                            gaps: dict[int, list[Gap]]) -> int:
    """Telemetry of every demo reservation's GPUs over [since, until), a batch per GPU and
    UTC day (`gaps`: GPU id → times it did not report). Returns the batches sent."""
    assignments = (Assignment.objects.filter(reservation__purpose__startswith="[demo]",
                                             assigned_from__lt=until, assigned_until__gt=since)
                   .select_related("gpu__node__cluster", "reservation__team")
                   .order_by("assigned_from", "gpu_id"))
    sent = 0
    for a in assignments:
        team = a.reservation.team.slug
        account = team if a.gpu.node.cluster.scheduler == Cluster.Scheduler.SLURM else None
        user = RUNNER.get(team, "alice")
        span = (max(since, a.assigned_from), min(until, a.assigned_until))
        for seg_start, seg_end, boot in _segments(*span, gaps.get(a.gpu_id, [])):
            day = seg_start.replace(hour=0, minute=0, second=0)
            while day < seg_end:
                starts = windows(max(seg_start, day), min(seg_end, day + DAY))
                day += DAY
                if not starts:
                    continue
                rng = random.Random(f"{a.gpu.uuid}:{starts[0]:%Y-%m-%d}")
                ingest(a.gpu, f"reserved:{starts[0]:%Y-%m-%dT%H:%M}:{boot}", boot,
                       starts[-1] + WINDOW + timedelta(minutes=1),
                       samples=[sample(a.gpu, w, _util(team, rng, w), 60) for w in starts],
                       processes=[process(a.gpu, w, user, account, 60) for w in starts])
                sent += 1
    return sent
