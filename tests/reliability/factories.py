"""A small fleet with a lemon, built relative to an instant (no test depends on today)."""

import stat
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from gpuquota.ingest.models import GpuEvent
from tests.factories import GpuClassFactory, NodeFactory, make_gpu


def event_add(gpu, ts, xid=None, type_="xid"):
    """An event as ingestion stores it."""
    GpuEvent.objects.create(event_id=uuid.uuid4(), node=gpu.node, gpu=gpu, ts=ts,
                            type=type_, xid=xid, received_at=ts)


def fleet_build(*, as_of: datetime) -> dict:
    """20 H100s on 5 nodes since 120 days before `as_of`: one lemon (5 x xid 79 in 70 days,
    each followed by the application's xid 45, and a remapped row), two GPUs with one
    failure each, and one GPU with 300 application XIDs (13, 31, 43) counting for nothing."""
    start = as_of - timedelta(days=120)
    klass = GpuClassFactory(name="H100-80GB")
    nodes = [NodeFactory(hostname=f"n{i:02d}") for i in range(5)]
    gpus = [make_gpu(node=nodes[i // 4], gpu_class=klass, index=i % 4, at=start)
            for i in range(20)]
    lemon, noisy = gpus[5], gpus[10]
    lemon_failures = [as_of - timedelta(days=d) for d in (70, 50, 30, 12, 3)]
    for ts in lemon_failures:
        event_add(lemon, ts, 79)
        event_add(lemon, ts + timedelta(minutes=2), 45)  # the cleanup after it: application
    event_add(lemon, as_of - timedelta(days=40), 63)  # a row remapped: a warning
    event_add(gpus[0], as_of - timedelta(days=20), 48)
    event_add(gpus[15], as_of - timedelta(days=60), type_="gpu_lost")
    for hour in range(300):  # a buggy program, not a bad GPU
        event_add(noisy, as_of - timedelta(hours=hour * 5), (13, 31, 43)[hour % 3])
    return {"lemon": lemon, "noisy": noisy, "failures": lemon_failures, "gpus": gpus}


#: A stand-in `scontrol` keeping the node's state in files beside it, so the Slurm runner
#: really runs a command and reads it back.
SCONTROL = """#!/bin/sh
dir=$(dirname "$0")
echo "$*" >> "$dir/calls"
if [ "$1" = update ]; then
  for a in "$@"; do case "$a" in
    State=DRAIN) echo IDLE+DRAIN > "$dir/flags";;
    State=RESUME) echo IDLE > "$dir/flags"; : > "$dir/reason";;
    Reason=*) echo "${a#Reason=}" > "$dir/reason";;
  esac; done
  exit 0
fi
flags=$(cat "$dir/flags" 2>/dev/null || echo IDLE)
reason=$(cat "$dir/reason" 2>/dev/null)
printf 'NodeName=%s Arch=x86_64 State=%s ThreadsPerCore=1 ' "$4" "$flags"
echo "Reason=$reason [slurm@2026-06-01T12:00:00] Comment=(null)"
"""


def scontrol_standin(directory: Path) -> Path:
    """Write the stand-in `scontrol` into `directory` (the backend's commands_dir)."""
    path = directory / "scontrol"
    path.write_text(SCONTROL)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return directory


def jobs_run(gpus: list, *, start: datetime, days: int, failed) -> None:
    """Each GPU runs one-GPU Slurm jobs of a day back to back from `start` for `days`, as
    the accounting import and the running-jobs observation store them; `failed(i, n)`: the
    GPU's n-th job FAILED (its user's program, or the GPU with no XID)."""
    from gpuquota.schedulers.models import SlurmJob, SlurmJobGpu

    jobs, held = [], []
    for i, gpu in enumerate(gpus):
        for n in range(days):
            job_id, begun = f"{i}{n:04d}", start + timedelta(days=n)
            ended = begun + timedelta(hours=23)
            jobs.append(SlurmJob(cluster=gpu.node.cluster, job_id=job_id, submitted_at=begun,
                                 started_at=begun, ended_at=ended, gpus=1,
                                 state="FAILED" if failed(i, n) else "COMPLETED"))
            held.append(SlurmJobGpu(cluster=gpu.node.cluster, job_id=job_id,
                                    node=gpu.node.hostname, gpu_index=gpu.index, gpu=gpu,
                                    first_seen_at=begun, last_seen_at=ended))
    SlurmJob.objects.bulk_create(jobs)
    SlurmJobGpu.objects.bulk_create(held)
