"""The lending simulation's stop model, calibrated from the soak on real Slurm daemons
(`bench/lending_soak.py`, docs/benchmarks.md "Lending soak"), and the owner's return driven
through the product's own observation of slurmctld (`slurm_loans_observe`).

With the Slurm backend, an owner's job on a lent GPU preempts the borrower at once (Slurm's
scheduler, not gpuquota's next reconcile): the owner waits what the soak measured between
its job's submission and start (SubmitTime -> StartTime, whole seconds), plus, for a borrower
that ignores SIGTERM, the site's `KillWait` before SIGKILL. The product reads both instants
from slurmctld, whenever its next observation comes, so its reconcile interval no longer
enters the time-to-return.
"""

from datetime import datetime
from types import SimpleNamespace

#: Owner's job SubmitTime -> StartTime (s) of the soak's `owner_job` cycles in shapes (a)
#: and (b) (2026-12-07, dev cluster, GraceTime=0, borrowers checkpointing on SIGTERM; the
#: soak's DETAIL lines in docs/benchmarks.md). Shape (c)'s four, measured after, were
#: 1, 0, 0, 0.
SOAK_OWNER_JOB_S = (0, 1, 0, 0, 1, 0, 1, 0)
#: Slurm's default KillWait: a borrower that ignores SIGTERM is killed this long after it
#: (the soak's dev cluster runs with 5 s and measured its `sigterm` returns at 7 to 9 s:
#: KillWait plus the 3 to 4 s of any return gpuquota removes the borrower from).
KILL_WAIT_S = 30
#: What the RESULT line says is modelled rather than measured.
MODELLED = "owner_wait=soak-sampled+KillWait,borrower_work,owner_demand,telemetry"


def owner_wait_s(rng, *, hangs: bool) -> int:
    """One owner's wait for a lent GPU, drawn from the soak (+ KillWait for a borrower
    that ignores SIGTERM)."""
    return rng.choice(SOAK_OWNER_JOB_S) + (KILL_WAIT_S if hangs else 0)


def _scontrol_time(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S")


def owner_job_line(*, job_id: str, account: str, node: str, index: int, submitted: datetime,
                   started: datetime) -> str:
    """The owner's job as `scontrol -d -o show job` prints a running job holding one GPU."""
    return (f"JobId={job_id} JobName=owner UserId=owner(1000) GroupId=owner(1000) "
            f"Account={account} QOS=normal JobState=RUNNING Reason=None Requeue=1 Restarts=0 "
            f"SubmitTime={_scontrol_time(submitted)} StartTime={_scontrol_time(started)} "
            f"NodeList={node} JOB_GRES=gpu:sim:1   Nodes={node} CPU_IDs=0 Mem=0 "
            f"GRES=gpu:sim:1(IDX:{index}) MinCPUsNode=1")


def owner_job_observed(*, cluster, text: str, at: datetime) -> int:
    """The product's observation of slurmctld's answer `text` at `at` (no commands run: the
    simulated cluster has none); the loans its owners' jobs took back."""
    from gpuquota.schedulers.slurm.loans import slurm_loans_observe
    from gpuquota.schedulers.slurm.options import SlurmOptions

    backend = SimpleNamespace(options=SlurmOptions(), runner=SimpleNamespace(run=None))
    return slurm_loans_observe(cluster=cluster, backend=backend, text=text, at=at,
                               settle_s=0).taken_back
