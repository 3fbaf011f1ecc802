"""Lending soak on real Slurm daemons (the dev cluster, deploy/slurm/dev-cluster): lend and
return one GPU again and again through the product's own services and observation, in each
site shape, and measure what slurmctld says. Not part of the test suite.

    .venv/bin/python -m bench.lending_soak [--cycles 60] [--shapes a,b,c] [--db-tag _x]

Each cycle lends gqnode2's GPU 3 (of a reservation holding gqnode2 whole, its other three
GPUs busy with the owner's jobs), starts a borrower on it (a batch job that counts seconds
of work and checkpoints every CHECKPOINT_S, and at once on SIGTERM), then returns it one
way, in turn:

- `owner_job`: the owner's job, submitted as the team's users submit today (no --qos),
  preempts the borrower; the running jobs' observation (`running_gpus_import`) ends the loan;
- `owner_ask`: "return now" (`loan_return_by`);
- `lending_off`: an opt-out of the reservation, ended by the lending scan;
- `assignment_end`: the reservation's end (the return the scan makes at the assignment's end);
- `sigterm`: "return now" with a borrower that ignores SIGTERM (killed after KillWait).

Time-to-return is the product's `freed_at - returned_at`: for `owner_job` the owner's
SubmitTime -> StartTime, otherwise the return -> the first answer of slurmctld without a
borrower's job on the GPU. Work lost = the borrower's seconds of work past its last
checkpoint when it left (from its own files); "lost beyond the checkpoint" counts borrowers
that lost more than one checkpoint interval of work. Prints per shape:

    RESULT soak shape=<s> cycles=<n> ttr_p50_s=<n> ttr_p95_s=<n> ttr_p99_s=<n> max_s=<n>
        requeued=<n> cancelled=<n> lost_beyond_checkpoint=<n> lost_work_max_s=<n>

and one for all shapes (shape=all), then a DETAIL line (JSON) per shape: by way of return.
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench.simdb import django_on_fresh_database

KINDS = ("owner_job", "owner_ask", "lending_off", "assignment_end", "sigterm")
CHECKPOINT_S = 5
BORROWER = """#!/bin/sh
# A borrower: counts seconds of work from its checkpoint, checkpoints every {every} s and,
# unless told to ignore it, at SIGTERM.
d="$1"; n=$(cat "$d/ckpt" 2>/dev/null || echo 0)
if [ "$2" = ignore ]; then trap '' TERM
else trap 'echo $n > "$d/ckpt"; exit 0' TERM; fi
while true; do
  sleep 1; n=$((n + 1)); echo $n > "$d/progress"
  [ $((n % {every})) -eq 0 ] && echo $n > "$d/ckpt"
done
"""


def nearest_rank(values: list[int], percent: int) -> int | None:
    import math

    ordered = sorted(values)
    return ordered[max(math.ceil(percent / 100 * len(ordered)), 1) - 1] if ordered else None


class Soak:
    def __init__(self, live, state: Path):
        self.live, self.state = live, state
        self.script = state / "borrower.sh"
        self.script.write_text(BORROWER.format(every=CHECKPOINT_S))
        self.script.chmod(0o755)

    def borrower(self, n: int, *, ignore: bool) -> tuple[str, Path]:
        d = self.state / f"b{n}"
        d.mkdir(mode=0o777)
        d.chmod(0o777)
        out = self.live.run("sbatch", "--parsable", "--uid=nobody", "--account=gq-lending",
                            "--gres=gpu:h100:1", "--output=/dev/null", "--chdir=/tmp",
                            "--nodelist=gqnode2",
                            str(self.script), str(d), "ignore" if ignore else "handle")
        return out.strip().split(";")[0], d

    def wait_running(self, job: str, timeout_s: float = 30) -> dict:
        found = self.live.wait_state(job, {"RUNNING"}, timeout_s=timeout_s)
        if found.get("JobState") != "RUNNING":
            raise RuntimeError(f"job {job} did not start: {found}")
        return found


def _lost(d: Path) -> int:
    def read(name: str) -> int:
        return int((d / name).read_text().strip() or 0) if (d / name).exists() else 0

    return max(read("progress") - read("ckpt"), 0)


def gpu_free(live, timeout_s: float = 30) -> None:
    """Wait until no job holds the lent GPU (gqnode2's GPU 3): the last cycle's jobs gone."""
    from gpuquota.schedulers.slurm.loans import held_jobs_parse

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jobs = held_jobs_parse(live.run("scontrol", "-d", "-o", "show", "job"))
        if not any(("gqnode2", 3) in j.gpus or (not j.gpus and j.account == "gq-lending")
                   for j in jobs):
            return
        time.sleep(0.2)
    raise RuntimeError("gqnode2's GPU 3 still held")


def cycle(soak: Soak, ctx, n: int, kind: str) -> dict:
    from gpuquota.lending.optouts import optout_create, optout_end
    from gpuquota.lending.scan import lending_scan
    from gpuquota.lending.services import E, loan_lend, loan_return, loan_return_by
    from gpuquota.reservations.models import Loan
    from gpuquota.schedulers.slurm.running import running_gpus_import

    live = soak.live
    gpu_free(live)
    loan = loan_lend(assignment=ctx.assignment, reason="soak")  # reconciles
    job, d = soak.borrower(n, ignore=kind == "sigterm")
    soak.wait_running(job)
    time.sleep(CHECKPOINT_S / 2 + n % CHECKPOINT_S)  # some work past a checkpoint
    running_gpus_import(cluster=ctx.cluster)
    owner = None
    if kind == "owner_job":
        owner = live.sbatch(user="daemon", account="vision", extra=("--nodelist=gqnode2",))
        soak.wait_running(owner, timeout_s=60)
        running_gpus_import(cluster=ctx.cluster)
    elif kind in ("owner_ask", "sigterm"):
        loan_return_by(loan=loan, actor=ctx.lead, is_owner_lead=True)
    elif kind == "lending_off":
        optout = optout_create(actor=ctx.lead, reason="soak", reservation=ctx.reservation)
        lending_scan()
        optout_end(optout=optout, actor=ctx.lead)
    else:
        loan_return(loan=loan, reason=E.ASSIGNMENT_END, note="the reservation's end (soak)")
    loan.refresh_from_db()
    deadline = time.monotonic() + 60
    while loan.freed_at is None and time.monotonic() < deadline:  # the next observations
        running_gpus_import(cluster=ctx.cluster)
        loan.refresh_from_db()
    state = live.job(job)
    requeued = state.get("JobState") == "PENDING" and state.get("Restarts") != "0"
    ckpt = (d / "ckpt").exists()  # what a requeued (or resubmitted) run starts from
    row = {"kind": kind, "reason": loan.end_reason, "job": job,
           "ttr_s": int((loan.freed_at - loan.returned_at).total_seconds())
           if loan.freed_at else None,
           "requeued": requeued, "state": state.get("JobState"), "lost_s": _lost(d),
           "checkpoint": ckpt, "lost_beyond_checkpoint": _lost(d) > CHECKPOINT_S}
    for j in filter(None, (job, owner)):
        subprocess.run(["scancel", j], env=live.env, capture_output=True, check=False)
    for j in filter(None, (job, owner)):
        live.wait_state(j, {"CANCELLED", "COMPLETED", "PREEMPTED", "FAILED"}, timeout_s=20)
    time.sleep(0.5)
    assert Loan.objects.filter(returned_at__isnull=True).count() == 0
    return row


def _clean(live, ctx) -> None:
    from gpuquota.lending.services import E, loan_return
    from gpuquota.reservations.models import Loan

    for loan in Loan.objects.filter(returned_at__isnull=True):
        loan_return(loan=loan, reason=E.ADMIN, note="soak cycle failed")
    for job in live.run("squeue", "-h", "-A", "gq-lending", "-o", "%i").split():
        subprocess.run(["scancel", job], env=live.env, capture_output=True, check=False)


def shape_run(live, shape: str, cycles: int, state: Path) -> list[dict]:
    from django.core.management import call_command
    from django.utils import timezone

    from gpuquota.schedulers.models import BackendConfig
    from gpuquota.schedulers.reconcile import cluster_reconcile
    from tests.schedulers.slurm_shapes import shape_b, shape_bare
    from tests.schedulers.test_slurm_live import _site

    call_command("flush", "--no-input", verbosity=0)
    shape_b(live) if shape == "b" else shape_bare(live)
    live.cluster.reshape(shape)
    site = _site(live)
    now = timezone.now()
    reservation = site.reserve("vision", site.gpus["gqnode2"], start=now - timedelta(minutes=5),
                               end=now + timedelta(hours=6))
    cluster_reconcile(cluster=site.cluster, reason="soak")
    assert BackendConfig.objects.get().mode == "write"

    class Ctx:
        pass

    ctx = Ctx()
    ctx.cluster, ctx.reservation = site.cluster, reservation
    ctx.assignment = reservation.assignments.get(gpu=site.gpus["gqnode2"][3])
    ctx.lead = site.teams["vision"].memberships.get().user
    busy = [live.sbatch(user="daemon", account="vision", seconds=36000) for _ in range(3)]
    for job in busy:
        live.wait_state(job, {"RUNNING"})
    soak = Soak(live, state)
    rows = []
    for n in range(cycles):
        kind = KINDS[n % len(KINDS)]
        try:
            rows.append(cycle(soak, ctx, len(list(state.glob("b*"))), kind))
        except (AssertionError, RuntimeError) as exc:  # counted, cleaned up, and on
            rows.append({"kind": kind, "failed": f"{type(exc).__name__}: {exc}"[:200],
                         "ttr_s": None, "requeued": False, "lost_s": 0,
                         "lost_beyond_checkpoint": False})
            _clean(live, ctx)
        print(json.dumps({"shape": shape, **rows[-1]}), flush=True)
    live.cancel_all()
    return rows


def summary(shape: str, rows: list[dict]) -> str:
    ttr = [r["ttr_s"] for r in rows if r["ttr_s"] is not None]
    return (f"RESULT soak shape={shape} cycles={len(rows)} "
            f"ttr_p50_s={nearest_rank(ttr, 50)} ttr_p95_s={nearest_rank(ttr, 95)} "
            f"ttr_p99_s={nearest_rank(ttr, 99)} max_s={max(ttr, default=None)} "
            f"not_freed={sum(r['ttr_s'] is None for r in rows)} "
            f"failed={sum('failed' in r for r in rows)} "
            f"requeued={sum(r['requeued'] for r in rows)} "
            f"cancelled={sum(not r['requeued'] and 'failed' not in r for r in rows)} "
            f"lost_beyond_checkpoint={sum(r['lost_beyond_checkpoint'] for r in rows)} "
            f"lost_work_max_s={max((r['lost_s'] for r in rows), default=0)}")


def detail(shape: str, rows: list[dict]) -> str:
    by = {}
    for kind in KINDS:
        ttr = [r["ttr_s"] for r in rows if r["kind"] == kind and r["ttr_s"] is not None]
        if ttr:
            by[kind] = {"n": len(ttr), "p50_s": nearest_rank(ttr, 50), "max_s": max(ttr),
                        "lost_work_max_s": max(r["lost_s"] for r in rows if r["kind"] == kind)}
    return "DETAIL " + json.dumps({"shape": shape, "by_kind": by})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=60, help="in all, split over shapes")
    parser.add_argument("--shapes", default="a,b,c")
    parser.add_argument("--db-tag", default="")
    args = parser.parse_args()
    django_on_fresh_database(f"gq_lendsoak{args.db_tag}", SLURM_RUNNING_GPUS_INTERVAL_S="60")
    import logging

    logging.getLogger("gpuquota").setLevel(logging.WARNING)  # not every command's output
    from tests.schedulers.slurm_cluster import Live, devcluster

    if missing := devcluster.missing_binaries():
        print(f"RESULT soak skipped=missing:{','.join(missing)}")
        return 2
    root = Path(tempfile.mkdtemp(prefix="gq-soak-"))
    root.chmod(0o755)
    state = Path(tempfile.mkdtemp(prefix="gq-soak-jobs-", dir="/tmp"))
    state.chmod(0o777)
    cluster = devcluster.DevCluster(root)
    started = time.monotonic()
    cluster.start()
    shapes = args.shapes.split(",")
    every: list[dict] = []
    try:
        live = Live(cluster)
        for i, shape in enumerate(shapes):
            count = args.cycles // len(shapes) + (i < args.cycles % len(shapes))
            rows = shape_run(live, shape, count, state)
            print(summary(shape, rows), flush=True)
            print(detail(shape, rows), flush=True)
            every += rows
        print(summary("all", every) + f" wall_s={int(time.monotonic() - started)}", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TZ", "UTC")
    raise SystemExit(main())
