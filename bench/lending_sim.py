"""The lending simulation's clock (`bench.lending`): one-minute steps through a workload
on the product's services. Every minute each GPU's owner works (or not) as the workload
says, a borrower job runs on each lent GPU, and the agents collect one-minute samples;
every `batch_s` they send them through ingestion, and the policy in force reads the stored
data: lending takes the lending policy's lend step (`gpuquota.lending`), lending the GPUs idle
for LEND_AFTER_IDLE_S (`--lend-after-idle-s`). An owner's job on a lent GPU asks
for it back at once. With the `soak` stop model (the default) Slurm preempts the borrower at
once: the owner waits what the soak on real daemons measured (bench/lending_calibration.py),
plus KillWait for a borrower that ignores SIGTERM, and the product's own observation of
slurmctld (`slurm_loans_observe`, fed the owner's job as `scontrol` prints it) ends the loan;
with `modelled` (the earlier model) the scheduler acts at its next reconcile tick
(`reconcile_s`) and the borrower stops `stop_s` after SIGTERM (or is killed after
`kill_after_s`). The time from the ask to the free GPU is the time-to-return. Every hour:
`reservations_advance`, and with reclaim the rollup sweep, the evaluation, an accept of
every recommendation and the releases due (as bench/reclaim.py); without reclaim nothing
reads the rollups before the figures, so the sweep runs once a simulated day."""

import random
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from bench.lending_calibration import owner_job_line, owner_job_observed, owner_wait_s
from bench.lending_fleet import BORROWER_ACCOUNTS, GIB, Agents, Fleet
from bench.workloads import Workload

POLICIES = ("none", "reclaim", "lending", "both")


@dataclass
class Job:
    """Preemptible borrower work: `done_s` of `work_s`, checkpointed every `checkpoint_s`."""

    id: int
    work_s: int
    checkpoint_s: int
    done_s: int = 0

    @property
    def account(self) -> str:
        return BORROWER_ACCOUNTS[self.id % len(BORROWER_ACCOUNTS)]


@dataclass
class Lent:
    loan_id: int
    assignment_id: int
    lent_from: datetime
    job: Job | None = None
    placed: datetime | None = None
    ask: datetime | None = None
    freed: datetime | None = None


class Backlog:
    """The standing queue: preempted jobs go back to its head with their checkpointed work."""

    def __init__(self, spec, seed: int):
        self.spec, self.rng, self.queue, self.made = spec, random.Random(seed), deque(), 0

    def take(self) -> Job:
        if self.queue:
            return self.queue.popleft()
        self.made += 1
        lo, hi = self.spec.job_hours
        return Job(id=self.made, work_s=int(self.rng.uniform(lo, hi) * 3600),
                   checkpoint_s=self.rng.choice(self.spec.checkpoint_s))

    def hangs(self) -> bool:
        """Whether the borrower ignores SIGTERM (killed after KillWait)."""
        return self.rng.random() < self.spec.hang_share

    def stop_after_s(self) -> int:
        if self.rng.random() < self.spec.hang_share:
            return self.spec.kill_after_s
        return self.rng.randint(*self.spec.stop_s)


class Clock:
    def __init__(self, *, workload: Workload, fleet: Fleet, policy: str, t0: datetime, days: int,
                 batch_s: int, reconcile_s: int, seed: int,
                 owner: dict, failures: dict, stop_model: str = "soak"):
        self.w, self.fleet, self.policy, self.t0 = workload, fleet, policy, t0
        self.stop_model = stop_model
        self.minutes = days * 1440
        self.batch_s, self.reconcile_s = batch_s, reconcile_s
        self.owner = owner  # gpu id -> [(Run | None, assignment id, team) | None] per minute
        self.failures = failures  # gpu id -> [(start minute, end minute)]
        self.rng = random.Random(seed)
        self.backlog = Backlog(workload.backlog, seed)
        self.agents = Agents(fleet)
        self.lent: dict[int, Lent] = {}
        self.borrower = {"lent_s": 0, "lost_s": 0, "done_s": 0, "run_s": 0, "preemptions": 0}
        self.owner_waited_s = 0
        self.assignments: dict[int, tuple] = {}  # assignment id -> (gpu, from, until)
        self.reservation_of: dict[int, int] = {}  # assignment id -> reservation id
        self.partial: dict[int, tuple[int, str]] = {}  # gpu -> borrower's s in the minute

    # --- helpers ------------------------------------------------------------------------
    def at(self, minute: int) -> datetime:
        return self.t0 + timedelta(minutes=minute)

    def failed(self, gpu_id: int, minute: int) -> bool:
        return any(a <= minute < b for a, b in self.failures.get(gpu_id, ()))

    def assigned(self, gpu_id: int, minute: int) -> int | None:
        """The owner's assignment holding the GPU at the minute's start, if any."""
        slot = self.owner[gpu_id][minute]
        if slot is None:
            return None
        _gpu, start, until = self.assignments[slot[1]]
        at = self.at(minute)
        return slot[1] if start <= at < until else None

    def assignments_refresh(self) -> None:
        from gpuquota.reservations.models import Assignment

        rows = list(Assignment.objects.values_list("id", "gpu_id", "assigned_from",
                                                   "assigned_until", "reservation_id"))
        self.assignments = {a[0]: (a[1], a[2], a[3]) for a in rows}
        self.reservation_of = {a[0]: a[4] for a in rows}

    # --- borrowers ----------------------------------------------------------------------
    def _preempt(self, lent: Lent, at: datetime) -> None:
        job = lent.job
        if job is None:
            return
        ran = int((at - lent.placed).total_seconds())
        job.done_s += ran
        self.borrower["run_s"] += ran
        lost = job.done_s % job.checkpoint_s
        job.done_s -= lost
        self.borrower["lost_s"] += lost
        self.borrower["preemptions"] += 1
        self.backlog.queue.appendleft(job)
        lent.job = None

    def _place(self, lent: Lent, at: datetime) -> None:
        lent.job, lent.placed = self.backlog.take(), at

    def _end_loan(self, gpu_id: int, at: datetime, freed: datetime, reason: str,
                  minute_start: datetime) -> None:
        """The backend's side of a return: the product's `loan_return` (an owner's job goes
        through `loans_return_for_reservation`, as a scheduler backend reports it), the
        borrower preempted at `freed`, and `loan_return_observed`."""
        from gpuquota.lending.services import (
            loan_return,
            loan_return_observed,
            loans_return_for_reservation,
        )
        from gpuquota.reservations.models import Loan, Reservation

        lent = self.lent.pop(gpu_id)
        if freed > minute_start and lent.job is not None:
            self.partial[gpu_id] = (int((freed - minute_start).total_seconds()),
                                    lent.job.account)
        self._preempt(lent, freed)
        if reason == Loan.EndReason.OWNER_JOB and self.stop_model == "soak":
            # slurmctld shows the owner's job holding the GPU; the product's observation
            # ends the loan (submitted -> returned_at, started -> freed_at).
            reservation = Reservation.objects.select_related("team").get(
                pk=self.reservation_of[lent.assignment_id])
            gpu = next(g for g in self.fleet.gpus if g.id == gpu_id)
            text = owner_job_line(job_id=f"{lent.loan_id}", account=reservation.team.slug,
                                  node=gpu.node.hostname, index=gpu.index, submitted=at,
                                  started=freed)
            assert owner_job_observed(cluster=gpu.node.cluster, text=text, at=freed) == 1
        elif reason == Loan.EndReason.OWNER_JOB:
            reservation = Reservation(pk=self.reservation_of[lent.assignment_id])
            loans_return_for_reservation(reservation=reservation, reason=reason,
                                         gpu_ids=[gpu_id], at=at, note="the owner's job")
        else:
            loan_return(loan=Loan(pk=lent.loan_id), reason=reason, at=at)
        loan = Loan.objects.get(pk=lent.loan_id)
        if loan.freed_at is None:
            loan_return_observed(loan=loan, freed_at=freed)
        self.borrower["lent_s"] += int((loan.returned_at - lent.lent_from).total_seconds())

    def borrowers_step(self, minute: int) -> None:
        """Borrower jobs that finish within the minute hand the GPU to the next job."""
        end = self.at(minute + 1)
        for lent in self.lent.values():
            if lent.ask is not None:
                continue
            while lent.job is not None:
                left = lent.job.work_s - lent.job.done_s
                finish = lent.placed + timedelta(seconds=left)
                if finish > end:
                    break
                self.borrower["done_s"] += left
                self.borrower["run_s"] += left
                self._place(lent, finish)

    # --- one minute ---------------------------------------------------------------------
    def events(self, minute: int) -> None:
        """Failures, assignment ends and owner asks at the minute's start; returns done."""
        at, end = self.at(minute), self.at(minute + 1)
        self.partial = {}
        for gpu_id in list(self.lent):
            lent = self.lent[gpu_id]
            until = self.assignments[lent.assignment_id][2]
            if self.failed(gpu_id, minute):
                self._end_loan(gpu_id, at, at, "gpu_failed", at)
            elif until <= at:
                self._end_loan(gpu_id, until, until, "assignment_end", at)
            elif lent.ask is None and self.owner_wants(gpu_id, minute, lent.assignment_id):
                lent.ask = at
                if self.stop_model == "soak":  # Slurm preempts at once (bench.lending_calibration)
                    wait = owner_wait_s(self.rng, hangs=self.backlog.hangs())
                else:  # the earlier model: the next reconcile tick, then the borrower's stop
                    wait = self.rng.randint(0, self.reconcile_s) + self.backlog.stop_after_s()
                lent.freed = at + timedelta(seconds=wait)
        for gpu_id in list(self.lent):
            lent = self.lent[gpu_id]
            if lent.ask is not None and lent.freed <= end:
                waited = int((lent.freed - lent.ask).total_seconds())
                self.owner_waited_s += waited
                self._end_loan(gpu_id, lent.ask, lent.freed, "owner_job", at)

    def owner_wants(self, gpu_id: int, minute: int, assignment_id: int | None = None) -> bool:
        slot = self.owner[gpu_id][minute]
        if slot is None or slot[0] is None:
            return False
        held = self.assigned(gpu_id, minute)
        return held is not None and (assignment_id is None or held == assignment_id)

    def telemetry(self, minute: int) -> None:
        """Each reporting GPU's sample of the minute: the borrower, the owner, or both (a
        return within the minute), as the agent would see them."""
        start, util_b, memory_b = self.at(minute), self.w.backlog.util, 40 * GIB
        for gpu in self.fleet.gpus:
            if self.failed(gpu.id, minute):
                continue
            parts, accounts = [], []
            lent = self.lent.get(gpu.id)
            borrower_s, account = 0, BORROWER_ACCOUNTS[0]
            if lent is not None and lent.job is not None:
                borrower_s, account = 60, lent.job.account
            elif gpu.id in self.partial:
                borrower_s, account = self.partial[gpu.id]
            if borrower_s:
                parts.append((borrower_s, util_b, memory_b))
                accounts.append((account, memory_b))
            if borrower_s < 60 and self.owner_wants(gpu.id, minute):
                run, _assignment, team = self.owner[gpu.id][minute]
                memory = int(run.memory_gib * GIB)
                parts.append((60 - borrower_s, run.util, memory))
                if run.process:
                    accounts.append((f"team-{team}", memory))
            util = sum(s * u for s, u, _m in parts) / 60
            self.agents.minute(gpu.id, start, util, max((m for *_x, m in parts), default=0),
                               accounts)

    # --- the policy ----------------------------------------------------------------------
    def lend_idle(self, minute: int) -> None:
        """The lending policy's lend step, as `gpuquota.lending.scan` takes it: the
        product's candidates, its idle reading of the stored samples (LEND_AFTER_IDLE_S)
        and `loan_lend`; a borrower is placed on each new loan. The scan's other steps are
        the simulated backend's (`events`): it sees the owner's job, the failed node and the
        assignment's end first. (When the figures in docs/benchmarks.md were taken, the
        scan's owner-process check read every process window since each loan began, on
        every pass, most of a run's time on loans of days; it now reads the last hour.)"""
        from gpuquota.core.errors import DomainError
        from gpuquota.lending.idle import gpus_idle
        from gpuquota.lending.selectors import lend_candidates
        from gpuquota.lending.services import loan_lend

        at = self.at(minute)
        candidates = lend_candidates(now=at)
        idle = gpus_idle(candidates=[c for _, c in candidates], now=at)
        for assignment, candidate in candidates:
            if candidate.gpu_id not in idle or self.owner_wants(candidate.gpu_id, minute):
                continue
            try:
                loan = loan_lend(assignment=assignment, at=at,
                                 reason="idle for the lending window")
            except DomainError:
                continue
            lent = Lent(loan_id=loan.id, assignment_id=assignment.id, lent_from=at)
            self._place(lent, at)
            self.lent[candidate.gpu_id] = lent

    def hourly(self, minute: int) -> None:
        from gpuquota.reservations.services import reservations_advance
        from gpuquota.usage.sweep import dirty_hours_process

        now, reclaim = self.at(minute), self.policy in ("reclaim", "both")
        reservations_advance(now=now)
        # reclaim reads the rollups every hour; otherwise nothing reads them before the
        # figures, and the sweep does a day of dirty hours at once far cheaper
        if reclaim or minute % 1440 == 0 or minute == self.minutes:
            while dirty_hours_process(limit=2000):
                pass
        if reclaim:
            self.reclaim(now)
        self.assignments_refresh()

    def reclaim(self, now: datetime) -> None:
        from reclaim.lifecycle import recommendations_accept_bulk, recommendations_release_due
        from reclaim.models import Recommendation
        from reclaim.services import recommendations_evaluate

        recommendations_evaluate(now=now)
        ids = list(Recommendation.objects.filter(
            status="open", kind__in=["reclaim", "right_size"], exemption__isnull=True)
            .values_list("id", flat=True))
        if ids:
            recommendations_accept_bulk(ids=ids, actor=self.fleet.admin, now=now)
        recommendations_release_due(now=now)

    def failures_step(self, minute: int) -> None:
        """An XID 79 from each GPU failing now; its node reboots when the failure ends."""
        for gpu_id, spans in self.failures.items():
            for a, b in spans:
                if a == minute:
                    self.agents.xid(gpu_id, self.at(minute))
                if b == minute:
                    self.agents.reboot(self.fleet.node_of[gpu_id].id)

    def run(self) -> None:
        lending = self.policy in ("lending", "both")
        per_batch = max(1, self.batch_s // 60)
        self.assignments_refresh()
        self.hourly(0)
        for minute in range(self.minutes):
            self.failures_step(minute)
            self.events(minute)
            self.borrowers_step(minute)
            self.telemetry(minute)
            if (minute + 1) % per_batch == 0:
                self.agents.flush(now=self.at(minute + 1))
                if (minute + 1) % 60 == 0:
                    self.hourly(minute + 1)
                if lending and minute + 1 < self.minutes:
                    self.lend_idle(minute + 1)
        self.close()

    def close(self) -> None:
        """Open loans end with the simulation (not a return: no time-to-return); the last
        dirty hours are swept."""
        from gpuquota.usage.sweep import dirty_hours_process

        while dirty_hours_process(limit=2000):
            pass
        end = self.at(self.minutes)
        for gpu_id in list(self.lent):
            lent = self.lent.pop(gpu_id)
            if lent.job is not None:
                self.borrower["run_s"] += int((end - lent.placed).total_seconds())
            self.borrower["lent_s"] += int((end - lent.lent_from).total_seconds())
