"""What was stored before a range, that importing it needs: each GPU's life, whether it
is lost and its last XID (`health.GpuState`), and the Slurm accounting's account and
user of the jobs dcgm-exporter names (`hpc_job`)."""

from collections import defaultdict
from datetime import UTC, datetime

from django.db.models import Max

from gpuquota.ingest.models import EventType, GpuEvent, Sample
from gpuquota.ingest.rows import ProcessRow
from gpuquota.inventory.models import Cluster, Gpu
from gpuquota.schedulers.models import SlurmJob
from gpuquota.telemetry.health import GpuState, life_boot


def _latest(ids: list[int], kind: str, before: datetime) -> dict[int, dict]:
    """The latest event of `kind` of each GPU before `before`."""
    found = (GpuEvent.objects.filter(gpu_id__in=ids, type=kind, ts__lt=before)
             .values("gpu_id").annotate(last=Max("ts")))
    pairs = {(row["gpu_id"], row["last"]) for row in found}
    if not pairs:
        return {}
    rows = GpuEvent.objects.filter(gpu_id__in={g for g, _ in pairs}, type=kind,
                                   ts__in={t for _, t in pairs})
    return {row["gpu_id"]: row for row in rows.values("gpu_id", "ts", "xid", "boot__boot_id")
            if (row["gpu_id"], row["ts"]) in pairs}


def gpu_states(uuids: list[str], *, before: int) -> dict[str, GpuState]:
    """Each known GPU's state before `before` (epoch seconds), from what was stored: its
    life is the one since its latest loss (or since it was first seen); it is still lost
    when no sample of it starts after that loss; its last XID is its latest XID event's.
    Sample and event times decide, never the order ranges were imported in."""
    instant = datetime.fromtimestamp(before, UTC)
    ids = dict(Gpu.objects.filter(uuid__in=uuids, parent__isnull=True)
               .values_list("id", "uuid"))
    lost = _latest(list(ids), EventType.GPU_LOST, instant)
    xids = _latest(list(ids), EventType.XID, instant)
    states = {}
    for gpu_id, gpu_uuid in ids.items():
        state = GpuState(boot_id=life_boot(gpu_uuid, None))
        if gpu_id in xids:
            state.xid = xids[gpu_id]["xid"]
        loss = lost.get(gpu_id)
        if loss is not None:
            lost_at = int(loss["ts"].timestamp())
            back = Sample.objects.filter(
                gpu_id__in=[gpu_id, *Gpu.objects.filter(parent_id=gpu_id).values_list(
                    "id", flat=True)], window_start__gte=loss["ts"], window_start__lt=instant,
                readings__gte=1).exists()
            if back:
                state.boot_id = life_boot(gpu_uuid, lost_at)
            else:
                state.boot_id = loss["boot__boot_id"] or state.boot_id
                state.lost_at = lost_at
        states[gpu_uuid] = state
    return states


def slurm_owners_fill(*, cluster: Cluster, processes: list[ProcessRow]) -> int:
    """Give each Slurm process record (`job_source = slurm`, the job id from `hpc_job`)
    the account and user Slurm's accounting has for the run of that job that covers its
    window (SlurmJob, imported from sacct or slurmrestd); the records of jobs it does not
    know are left as they are. Returns how many records found no job."""
    slurm = [p for p in processes if p.job_source == "slurm"]
    if not slurm:
        return 0
    runs = defaultdict(list)
    for row in SlurmJob.objects.filter(cluster=cluster, job_id__in={p.job_id for p in slurm}
                                       ).values("job_id", "started_at", "ended_at", "account",
                                                "user").order_by("started_at"):
        runs[row["job_id"]].append(row)
    unknown = 0
    for process in slurm:
        run = _run_in(runs.get(process.job_id, []),
                      datetime.fromtimestamp(process.window_start, UTC),
                      datetime.fromtimestamp(process.window_end, UTC))
        if run is None:
            unknown += 1
            continue
        process.job_account = run["account"][:256] or None
        process.user = run["user"][:256] or None
    return unknown


def _run_in(runs: list[dict], start: datetime, end: datetime) -> dict | None:
    """The latest run that overlaps [start, end), else the latest that started before
    `end` (a requeued job has one row per run; the exporter may still name a job a scrape
    after its accounting end)."""
    started = [r for r in runs if r["started_at"] is not None and r["started_at"] < end]
    overlapping = [r for r in started if r["ended_at"] is None or r["ended_at"] > start]
    return (overlapping or started or [None])[-1]
