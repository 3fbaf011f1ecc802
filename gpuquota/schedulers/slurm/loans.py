"""Lent GPUs as slurmctld shows them (`scontrol -d -o show job`, the GPUs each job holds by
`IDX`), read at every running-jobs observation and after every reconcile:

- an open loan whose GPU a job of the reserving team holds was taken back by its owner:
  the `LOAN_OWNER_JOB` hooks end it (lending: `owner_job`, asked when the owner's job was
  submitted, freed when it started, both as slurmctld says);
- a returned loan whose GPU a borrower's job (account `gq-lending` or QOS `gq-scavenger`)
  still holds: the borrower is requeued (`scontrol requeue`: SIGTERM, KillWait, then
  SIGKILL, and the job pends again from its last checkpoint), or cancelled where the job
  cannot be requeued (the site's `JobRequeue=0` or `--no-requeue`) or is still there
  STUCK_AFTER past the notice (GraceTime); each removal is audited;
- a returned loan whose GPU slurmctld shows no borrower's job on is freed then
  (`freed_at`), so `freed_at - returned_at` is the time-to-return measured from slurmctld.

The samples never set `freed_at` on a cluster whose backend observes (lending's scan leaves
those loans to the backend). A cluster in export mode is observed, never changed.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import ClusterIdentity
from gpuquota.core.contributions import hooks_call
from gpuquota.core.models import AuditEntry
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Cluster
from gpuquota.reservations.models import Loan
from gpuquota.schedulers.backend import BackendError
from gpuquota.schedulers.models import BackendConfig, SlurmJobGpu
from gpuquota.schedulers.slurm.objects import NODE_DETAIL_RE, gres_indices, hostlist_expand
from gpuquota.schedulers.slurm.options import LENDING_ACCOUNT, SCAVENGER_QOS

#: Job states in which a job still holds its GPUs (a requeued or preempted job holds them,
#: COMPLETING, until its processes are gone and its epilog ran; PREEMPTED, CANCELLED and the
#: other final states hold nothing).
HOLDING_STATES = ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "REQUEUED", "RESIZING",
                  "SIGNALING", "STAGE_OUT")
#: After removing borrowers, how long a pass watches slurmctld for them to leave (KillWait is
#: 30 s by default); what is still there then is looked at again by the next pass.
SETTLE_S = 40.0
POLL_S = 0.5
#: A requeued borrower still on the GPU this long after the notice (the scavenger QOS's
#: GraceTime) is cancelled: the requeue did not take (KillWait is 30 s by default).
STUCK_AFTER = timedelta(seconds=120)
_FIELDS_RE = re.compile(r"(?<![\w/])(JobId|JobState|Account|UserId|QOS|SubmitTime|StartTime|"
                        r"Requeue)=(\S*)")


@dataclass(frozen=True)
class HeldJob:
    """A job holding GPUs now, as slurmctld says: (node, index) pairs and its times."""

    job_id: str
    account: str
    user: str
    qos: str
    state: str
    submitted_at: datetime | None
    started_at: datetime | None
    requeue: bool
    gpus: tuple[tuple[str, int], ...]

    @property
    def borrower(self) -> bool:
        return self.account == LENDING_ACCOUNT or self.qos == SCAVENGER_QOS


def _instant(value: str) -> datetime | None:
    """`2026-12-07T11:20:03` (the runner's TZ=UTC) -> an aware instant; None for Unknown."""
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def _iso(at: datetime | None) -> str:
    return at.isoformat() if at else ""


def held_jobs_parse(text: str) -> list[HeldJob]:
    """`scontrol -d -o show job` -> the jobs that hold GPUs (pending ones hold none). A
    COMPLETING job (requeued or preempted, its processes not yet gone) still holds its GPUs
    but slurmctld no longer says which: it comes with no `gpus`."""
    found = []
    for line in text.splitlines():
        record = dict(_FIELDS_RE.findall(line))
        if "JobId" not in record or record.get("JobState") not in HOLDING_STATES:
            continue
        gpus = tuple((node, i) for nodes, gres in NODE_DETAIL_RE.findall(line)
                     for node in hostlist_expand(nodes) for i in gres_indices(gres))
        found.append(HeldJob(
            job_id=record["JobId"], account=record.get("Account", ""),
            user=record.get("UserId", "").split("(")[0], qos=record.get("QOS", ""),
            state=record["JobState"], submitted_at=_instant(record.get("SubmitTime", "")),
            started_at=_instant(record.get("StartTime", "")),
            requeue=record.get("Requeue", "1") != "0", gpus=gpus))
    return found


def _holders(jobs: list[HeldJob]) -> dict[tuple[str, int], list[HeldJob]]:
    by_gpu: dict[tuple[str, int], list[HeldJob]] = {}
    for job in jobs:
        for gpu in job.gpus:
            by_gpu.setdefault(gpu, []).append(job)
    return by_gpu


def _team_accounts(cluster: Cluster, at: datetime) -> dict[int, set[str]]:
    accounts: dict[int, set[str]] = {}
    for key, team_id in ClusterIdentity.objects.filter(
            Q(valid_until__isnull=True) | Q(valid_until__gt=at), cluster=cluster,
            kind=ClusterIdentity.Kind.SLURM_ACCOUNT, valid_from__lte=at,
    ).values_list("key", "team_id"):
        accounts.setdefault(team_id, set()).add(key)
    return accounts


def _loans(cluster: Cluster):
    return Loan.objects.filter(gpu__node__cluster=cluster, gpu__index__isnull=False).select_related(
        "gpu__node", "assignment__reservation")


@dataclass
class LoansSeen:
    taken_back: int = 0
    freed: int = 0
    requeued: int = 0
    cancelled: int = 0

    def as_dict(self) -> dict:
        return {"taken_back": self.taken_back, "freed": self.freed,
                "requeued": self.requeued, "cancelled": self.cancelled}


def slurm_loans_observe(*, cluster: Cluster, backend, text: str | None = None,
                        at: datetime | None = None, settle_s: float = SETTLE_S) -> LoansSeen:
    """One look at the cluster's lent and returning GPUs (`text`: an `scontrol -d -o show
    job` answer read at `at`, else read now): owners' jobs end loans, borrowers of returned
    loans are removed (write mode), returned GPUs no borrower holds are freed."""
    run = backend.runner.run
    if text is None or at is None:
        at, text = timezone.now(), run(["scontrol", "-d", "-o", "show", "job"]).stdout
    seen = LoansSeen()
    node = backend.options.node_name
    jobs = held_jobs_parse(text)
    holders = _holders(jobs)
    accounts = _team_accounts(cluster, at)

    def key(loan: Loan) -> tuple[str, int]:
        return node(loan.gpu.node.hostname), loan.gpu.index

    for loan in _loans(cluster).filter(returned_at__isnull=True, lent_from__lt=at):
        team = accounts.get(loan.assignment.reservation.team_id, set())
        owners = [j for j in holders.get(key(loan), [])
                  if j.account in team and not j.borrower and j.state == "RUNNING"]
        if not owners:
            continue
        owner = min(owners, key=lambda j: (j.started_at or at, j.job_id))
        hooks_call("LOAN_OWNER_JOB", loan=loan, job_id=owner.job_id,
                   asked_at=min(owner.submitted_at or at, at),
                   freed_at=min(owner.started_at or at, at))
        seen.taken_back += 1

    write = BackendConfig.objects.filter(cluster=cluster).values_list(
        "mode", flat=True).first() == BackendConfig.Mode.WRITE
    grace = timedelta(seconds=backend.options.loan_grace_s)
    waiting: dict[int, Loan] = {}
    for loan in _loans(cluster).filter(returned_at__isnull=False, freed_at__isnull=True):
        borrowers = [j for j in holders.get(key(loan), []) if j.borrower]
        if not borrowers and not _leaving(loan, jobs):
            owner_start = [j.started_at for j in holders.get(key(loan), [])
                           if j.started_at and j.started_at >= loan.returned_at]
            seen.freed += loan_freed(loan=loan, at=min([at, *owner_start]))
            continue
        waiting[loan.pk] = loan
        if write:
            late = at >= loan.returned_at + grace + STUCK_AFTER
            before = _requeued_before(loan)
            for job in borrowers:
                stuck = (job.job_id, _iso(job.started_at)) in before
                if stuck and not late:
                    continue  # requeued, leaving (SIGTERM, KillWait, SIGKILL): not again
                removed = _borrower_remove(run, loan, job, cancel=stuck or not job.requeue)
                seen.requeued += removed == "requeued"
                seen.cancelled += removed == "cancelled"
    if waiting and write and settle_s > 0:
        seen.freed += _settle(run, waiting, key, settle_s)
    return seen


def _leaving(loan: Loan, jobs: list[HeldJob]) -> bool:
    """Whether a borrower seen on the loan's GPU (SlurmJobGpu, or removed by gpuquota)
    still holds it without slurmctld saying which GPU (COMPLETING: its processes are not
    gone yet)."""
    gone_quiet = {j.job_id for j in jobs if not j.gpus}
    if not gone_quiet:
        return False
    known = {job for job, _ in _requeued_before(loan)} | set(SlurmJobGpu.objects.filter(
        gpu_id=loan.gpu_id, account=LENDING_ACCOUNT, last_seen_at__gte=loan.lent_from,
    ).values_list("job_id", flat=True))
    return bool(known & gone_quiet)


def _requeued_before(loan: Loan) -> set[tuple[str, str]]:
    """(job, start) of the borrowers an earlier pass requeued off this loan's GPU: one still
    there with the same start did not leave (it is cancelled once the notice ran out); a
    job started again since is a new run, requeued again."""
    return {(c.get("job", ""), c.get("started_at", "")) for c in AuditEntry.objects.filter(
        action="loan.borrower_requeued", object_type="reservations.loan",
        object_id=str(loan.pk)).values_list("changes", flat=True)}


def _borrower_remove(run, loan: Loan, job: HeldJob, *, cancel: bool) -> str:
    """Requeue the borrower's job (cancel it when it cannot be requeued, or when `cancel`);
    audited on the loan. Which it was, or "" when slurmctld refused both."""
    how, why = "requeued", "the lent GPU was returned"
    if not cancel:
        try:
            run(["scontrol", "requeue", job.job_id])
        except BackendError as exc:  # not requeueable after all (JobRequeue=0, --no-requeue)
            cancel, why = True, f"scontrol requeue refused: {exc.message}"
    elif not job.requeue:
        why = "the job cannot be requeued (JobRequeue=0 or --no-requeue)"
    else:
        why = "still on the GPU after the notice"
    if cancel:
        how = "cancelled"
        try:
            run(["scancel", job.job_id])
        except BackendError:
            return ""
    audit_record(actor=None, action=f"loan.borrower_{how}", obj=loan,
                 team=loan.assignment.reservation.team,
                 changes={"job": job.job_id, "account": job.account, "user": job.user,
                          "started_at": _iso(job.started_at), "gpu": loan.gpu.uuid},
                 reason=why)
    return how


def _settle(run, waiting: dict[int, Loan], key, settle_s: float) -> int:
    """Watch slurmctld until the removed borrowers leave the GPUs (or `settle_s` passed);
    each loan is freed at the first answer that shows no borrower on its GPU."""
    freed = 0
    deadline = time.monotonic() + settle_s
    while waiting and time.monotonic() < deadline:
        time.sleep(POLL_S)
        at = timezone.now()
        jobs = held_jobs_parse(run(["scontrol", "-d", "-o", "show", "job"]).stdout)
        holders = _holders(jobs)
        for pk, loan in list(waiting.items()):
            if not any(j.borrower for j in holders.get(key(loan), [])) and not _leaving(
                    loan, jobs):
                freed += loan_freed(loan=loan, at=at)
                del waiting[pk]
    return freed


def loan_freed(*, loan: Loan, at: datetime) -> int:
    """The returned loan's GPU seen free of borrowers by slurmctld at `at`: `freed_at` (the
    first observation stands, never before the return), audited. 1 when it was set."""
    with transaction.atomic():
        loan = Loan.objects.select_for_update().select_related(
            "gpu", "assignment__reservation__team").get(pk=loan.pk)
        if loan.freed_at is not None or loan.returned_at is None:
            return 0
        loan.freed_at = max(at.replace(microsecond=0), loan.returned_at)
        loan.save(update_fields=["freed_at"])
        audit_record(actor=None, action="loan.freed", obj=loan,
                     team=loan.assignment.reservation.team,
                     changes={"gpu": loan.gpu.uuid, "freed_at": loan.freed_at.isoformat(),
                              "seen_by": "slurmctld (scontrol show job)",
                              "time_to_return_s": int(
                                  (loan.freed_at - loan.returned_at).total_seconds())})
    return 1
