"""Stopping a running Slurm job (docs/jobs.md#stopping), for the zero-use policy: read the
job from slurmctld (`scontrol -o show job <id>`), requeue it where asked (`scontrol requeue`:
it pends again and restarts from its last checkpoint), or cancel it (`scancel`) where asked,
where it cannot be requeued (the site's `JobRequeue=0` or the job's `--no-requeue`) or where
slurmctld refused the requeue, saying so; then read it back. Only a job id of Slurm's shape
reaches a command, and only the run gpuquota saw (a job requeued since runs again under the
same id: that new run is left alone)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from gpuquota.schedulers.backend import BackendError, JobStopped
from gpuquota.schedulers.runner import Runner

#: What a Slurm job id looks like (an array task: 123_4); nothing else reaches a command.
SLURM_JOB_ID = re.compile(r"^[0-9]{1,12}(_[0-9]{1,9})?$")
#: The states of a job that has not ended (a requeued job pends again).
ACTIVE = {"RUNNING", "PENDING", "SUSPENDED", "CONFIGURING", "RESIZING", "SIGNALING",
          "STOPPED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}
REQUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "COMPLETING"}
SETTLE_S = 10.0
POLL_S = 0.25
_FIELDS = re.compile(r"(?<![\w/])(JobId|JobState|Requeue|Restarts|StartTime)=(\S*)")


def _job(runner: Runner, job_id: str) -> dict[str, str]:
    """The job's fields as slurmctld shows them; {} once it has forgotten the job."""
    done = runner.run(["scontrol", "-o", "show", "job", job_id], check=False)
    if done.returncode != 0:
        if "Invalid job id" in done.stderr + done.stdout:
            return {}
        raise BackendError(f"scontrol show job {job_id} exited with {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()[:200]}")
    return dict(_FIELDS.findall(done.stdout.splitlines()[0] if done.stdout else ""))


def _started(fields: dict[str, str]) -> datetime | None:
    try:
        return datetime.strptime(fields.get("StartTime", ""), "%Y-%m-%dT%H:%M:%S").replace(
            tzinfo=UTC)
    except ValueError:
        return None


def _watch(runner: Runner, job_id: str, done) -> dict[str, str]:
    """Read the job back until `done(fields)` or SETTLE_S passed; the last fields read."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        fields = _job(runner, job_id)
        if done(fields) or time.monotonic() > deadline:
            return fields
        time.sleep(POLL_S)


def job_stop(runner: Runner, job_id: str, *, requeue: bool,
             started_at: datetime | None = None) -> JobStopped:
    """Requeue (where asked and possible) or cancel the running job, verified by reading it
    back; a BackendError when it is not running, is another run, or stays."""
    if not SLURM_JOB_ID.match(job_id):
        raise BackendError(f"Not a Slurm job id: {job_id!r}.")
    before = _job(runner, job_id)
    state = before.get("JobState", "")
    if state != "RUNNING":
        raise BackendError(f"Slurm shows job {job_id} {state or 'gone'}, not running: left "
                           "alone.")
    if started_at is not None and _started(before) not in (None, started_at):
        raise BackendError(f"Job {job_id} runs again since {before['StartTime']} (requeued): "
                           "this run is left alone.")
    note = ""
    if requeue and before.get("Requeue", "1") == "0":
        note = "the job cannot be requeued (JobRequeue=0 or --no-requeue): cancelled instead"
    elif requeue:
        restarts = int(before.get("Restarts", "0") or 0)
        try:
            runner.run(["scontrol", "requeue", job_id])
        except BackendError as exc:
            note = f"scontrol requeue refused ({exc.message}): cancelled instead"
        else:
            after = _watch(runner, job_id, lambda f: f.get("JobState") in REQUEUED
                           or int(f.get("Restarts", "0") or 0) > restarts)
            if after.get("JobState") in REQUEUED or int(after.get("Restarts", "0") or 0) > \
                    restarts:
                return JobStopped("requeued")
            raise BackendError(f"scontrol accepted the requeue of job {job_id} but Slurm "
                               f"shows it {after.get('JobState') or 'gone'}.")
    runner.run(["scancel", job_id])
    after = _watch(runner, job_id, lambda f: f.get("JobState", "") not in ACTIVE)
    if after.get("JobState", "") in ACTIVE:
        raise BackendError(f"scancel accepted job {job_id} but Slurm still shows it "
                           f"{after['JobState']}.")
    return JobStopped("cancelled", note=note)
