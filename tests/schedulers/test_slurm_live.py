"""The Slurm backend against real Slurm daemons (the dev cluster): real jobs pend on a
reserved node and past a GPU limit, drift is repaired, a lent GPU's scavenger job is
requeued when the owner's job arrives. Every live test is in this file (one xdist worker
starts the cluster)."""

import io
import re
import statistics
import time
from datetime import timedelta

import pytest
from django.core.management import call_command

from accounts.models import ClusterIdentity
from gpuquota.reservations.models import Loan
from gpuquota.schedulers.backend import backend_for
from gpuquota.schedulers.models import (
    BackendConfig,
    Capabilities,
    Drift,
    ImportCursor,
    LoanReturn,
    Problem,
    ReservationBinding,
    SlurmJob,
    SlurmJobGpu,
)
from gpuquota.schedulers.reconcile import cluster_reconcile
from gpuquota.schedulers.services import backend_config_update
from gpuquota.schedulers.slurm.jobs import (
    loan_returns_record,
    slurm_clusters_accounting_import,
    slurm_jobs_import,
)
from gpuquota.schedulers.slurm.objects import gres_indices
from gpuquota.schedulers.slurm.running import running_gpus_import
from tests.factories import QuotaFactory
from tests.schedulers.conftest import Site

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def _site(live) -> Site:
    site = Site(nodes=("gqnode1", "gqnode2"))
    # The jobs run as existing system users: vision's member is `daemon`, speech's `nobody`.
    for slug, unix in (("vision", "daemon"), ("speech", "nobody")):
        ClusterIdentity.objects.filter(kind="unix_user", user__memberships__team__slug=slug) \
            .update(key=unix)
    QuotaFactory(team=site.teams["speech"], gpu_class=site.gpu_class, gpus=2)
    backend_config_update(cluster=site.cluster, actor=site.admin,
                          options={"slurm_conf": live.slurm_conf})
    return site


def _reconcile(site, **kwargs):
    return cluster_reconcile(cluster=site.cluster, reason="test", **kwargs)


def _returns_recorded(site, owner_job: str) -> list[int]:
    """Import Slurm's accounting and record the returns until the owner's job's return is
    there (slurmctld sends the owner's start and the borrower's preemption to slurmdbd a
    moment later, the two not always together on a loaded machine); its time-to-return."""
    deadline = time.monotonic() + 30
    while True:
        slurm_jobs_import(cluster=site.cluster)
        found = [x.time_to_return_s for x in loan_returns_record(cluster=site.cluster)
                 if x.owner_job_id == owner_job]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def test_whole_node_reservation_quota_idempotence_and_drift(live):
    site = _site(live)
    from django.utils import timezone

    now = timezone.now()
    r = site.reserve("vision", site.gpus["gqnode1"], start=now - timedelta(minutes=5),
                     end=now + timedelta(hours=1))
    first = _reconcile(site)
    assert first.outcome == "ok", first
    binding = ReservationBinding.objects.get(reservation=r)
    assert (binding.level, binding.scheduler_object) == ("whole_nodes", f"gq-res-{r.pk}")
    assert "cannot reserve single GPUs" in binding.why and "gqnode1" in binding.why
    res = live.run("scontrol", "-o", "show", "reservation", f"gq-res-{r.pk}")
    assert "Nodes=gqnode1" in res and "Accounts=vision" in res

    # A second run against the real Slurm finds nothing to do.
    assert _reconcile(site).actions == []

    # Another account's job pends on the reserved node while the team's job runs there.
    foreign = live.sbatch(user="nobody", account="speech", extra=("--nodelist=gqnode1",))
    own = live.sbatch(user="daemon", account="vision")
    assert live.wait_state(own, {"RUNNING"})["NodeList"] == "gqnode1"
    assert live.job(foreign)["JobState"] == "PENDING"

    # GrpTRES: vision holds 4 GPUs, so its 5th concurrent GPU job pends, even when it names
    # no GPU type (job_submit.lua types it).
    more = [live.sbatch(user="daemon", account="vision") for _ in range(3)]
    more.append(live.sbatch(user="daemon", account="vision", typed=False))
    for job in more[:3]:
        assert live.wait_state(job, {"RUNNING"})["JobState"] == "RUNNING"
    fifth = live.wait_state(more[3], {"RUNNING"}, timeout_s=4)
    assert (fifth["JobState"], fifth["Reason"]) == ("PENDING", "AssocGrpGRES")

    # Drift: the reservation deleted by hand is found, recreated and audited.
    live.cancel_all()  # Slurm refuses to delete a reservation in use
    live.run("scontrol", "delete", f"ReservationName=gq-res-{r.pk}")
    repaired = _reconcile(site)
    assert repaired.drift == 1 and repaired.actions == [f"create reservation gq-res-{r.pk}"]
    drift = Drift.objects.get(object_name=f"gq-res-{r.pk}")
    assert drift.kind == "missing" and drift.repaired_at is not None
    assert "Nodes=gqnode1" in live.run("scontrol", "-o", "show", "reservation", f"gq-res-{r.pk}")

    # The dry run by hand prints the commands and changes nothing.
    r.status = "ended"
    r.save(update_fields=["status"])
    out = io.StringIO()
    call_command("slurm_reconcile", "--cluster", "dev", "--dry-run", stdout=out)
    assert f"scontrol delete ReservationName=gq-res-{r.pk}" in out.getvalue()
    assert "sacctmgr -i modify account where name=vision cluster=gqdev set " \
        "grptres=gres/gpu:h100=0" in out.getvalue()
    assert f"gq-res-{r.pk}" in live.run("scontrol", "-o", "show", "reservation")


def test_lent_gpu_runs_a_scavenger_job_requeued_when_the_owner_job_arrives(live):
    site = _site(live)
    from django.utils import timezone

    now = timezone.now()
    r = site.reserve("vision", site.gpus["gqnode2"], start=now - timedelta(minutes=5),
                     end=now + timedelta(hours=1))
    lent_gpu = site.gpus["gqnode2"][3]
    Loan.objects.create(assignment=r.assignments.get(gpu=lent_gpu), gpu=lent_gpu,
                        lent_from=now - timedelta(minutes=1))
    assert _reconcile(site).outcome == "ok"
    res = live.run("scontrol", "-o", "show", "reservation", f"gq-res-{r.pk}")
    assert "Accounts=gq-lending,vision" in res

    returns = []
    for n in range(3):
        if n:  # the owner's job ended the last loan (owner_job): lent again, no 409
            from gpuquota.lending.services import loan_lend

            assert not Loan.objects.filter(returned_at__isnull=True).exists()
            loan_lend(assignment=r.assignments.get(gpu=lent_gpu), reason="test")  # reconciles
        owners = [live.sbatch(user="daemon", account="vision") for _ in range(3)]
        for job in owners:
            live.wait_state(job, {"RUNNING"})
        borrower = live.sbatch(user="nobody", account="gq-lending", srun=True)
        assert live.wait_state(borrower, {"RUNNING"})["NodeList"] == "gqnode2"
        owner = live.sbatch(user="daemon", account="vision")
        started = live.wait_state(owner, {"RUNNING"}, timeout_s=60)
        assert started["JobState"] == "RUNNING"
        requeued = live.job(borrower)
        assert requeued["JobState"] == "PENDING" and requeued["Restarts"] == "1"  # not lost
        returns += _returns_recorded(site, owner)
        live.cancel_all()
    assert len(returns) == 3
    print("time-to-return s (min, median, max):",  # the figures in docs/slurm.md
          min(returns), statistics.median(returns), max(returns))
    assert max(returns) <= 30 + BackendConfig.objects.get().options.get("loan_grace_s", 0)
    assert LoanReturn.objects.count() == 3
    # Each return ended its loan as the owner's job, as slurmctld's times say.
    assert list(Loan.objects.values_list("end_reason", flat=True)) == ["owner_job"] * 3
    # Jobs on the reservation: Slurm's accounting names it (mapped from its id).
    assert SlurmJob.objects.filter(reservation=f"gq-res-{r.pk}", team=site.teams["vision"]).exists()


def _wait(predicate, timeout_s: float = 20):
    deadline = time.monotonic() + timeout_s
    while not (found := predicate()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def test_running_jobs_gpus_are_read_from_slurm_and_prove_foreign_use(live):
    """Two of gqnode1's four GPUs reserved (held by the account's limit only): slurmctld's
    `IDX:` says which GPUs each running job holds, the prolog wrote the same, and another
    account's job on a reserved GPU is foreign use, by GPU. The epilog removes the records."""
    from django.utils import timezone

    from gpuquota.core.timeutil import Period
    from gpuquota.schedulers.selectors import foreign_use

    site = _site(live)
    now = timezone.now()
    r = site.reserve("vision", site.gpus["gqnode1"][:2], start=now - timedelta(minutes=5),
                     end=now + timedelta(hours=1))
    assert _reconcile(site).outcome == "ok"
    assert ReservationBinding.objects.get(reservation=r).level == "quota"

    foreign = live.sbatch(user="nobody", account="speech", extra=("--nodelist=gqnode1",))
    assert live.wait_state(foreign, {"RUNNING"})["JobState"] == "RUNNING"
    own = live.sbatch(user="daemon", account="vision", gpus=2, extra=("--nodelist=gqnode1",))
    assert live.wait_state(own, {"RUNNING"})["JobState"] == "RUNNING"
    running_gpus_import(cluster=site.cluster)
    held = {(row.job_id, row.node, row.gpu_index): row.gpu for row in SlurmJobGpu.objects.all()}
    assert set(held) == {(foreign, "gqnode1", 0), (own, "gqnode1", 1), (own, "gqnode1", 2)}
    assert held[(foreign, "gqnode1", 0)] == site.gpus["gqnode1"][0]
    records = live.cluster.root / "gpu-jobs" / "gqnode1"
    assert {p.name: p.read_text().split()[0] for p in records.iterdir()} == {
        "gpu0": foreign, "gpu1": own, "gpu2": own}

    assert _wait(lambda: slurm_jobs_import(cluster=site.cluster) and SlurmJob.objects.filter(
        job_id=own, started_at__isnull=False).exists())
    found = foreign_use(period=Period(now - timedelta(days=1), now + timedelta(days=1)))
    assert [(f.job, f.gpus) for f in found] == [(foreign, ("gqnode1:0",))]

    live.run("scancel", foreign)
    assert _wait(lambda: not (records / "gpu0").exists()), "the epilog left the record"
    assert (records / "gpu1").exists()
def _imported_jobs(site) -> list[tuple]:
    return sorted(SlurmJob.objects.filter(cluster=site.cluster).values_list(
        "job_id", "submitted_at", "started_at", "ended_at", "state", "account", "user",
        "partition", "qos", "reservation", "nodes", "gpu_tres", "gpus", "team", "time_limit_s"))


def test_job_accounting_through_slurmrestd_with_a_jwt(live):
    site = _site(live)
    from django.utils import timezone

    now = timezone.now()
    r = site.reserve("vision", site.gpus["gqnode1"], start=now - timedelta(minutes=5),
                     end=now + timedelta(hours=1))
    assert _reconcile(site).outcome == "ok"
    two = live.sbatch(user="daemon", account="vision", gpus=2,  # MAGNETIC: in gq-res-<id>
                      extra=("--time=30",))
    assert live.wait_state(two, {"RUNNING"})["NodeList"] == "gqnode1"
    requeued = live.sbatch(user="nobody", account="speech", extra=("--nodelist=gqnode2",))
    live.wait_state(requeued, {"RUNNING"})
    live.run("scontrol", "requeue", requeued)
    short = live.sbatch(user="nobody", account="speech", seconds=1)
    live.wait_state(short, {"COMPLETED"})
    deadline = time.monotonic() + 20  # slurmctld sends the runs to slurmdbd a moment later
    while time.monotonic() < deadline:
        slurm_jobs_import(cluster=site.cluster)
        if {(requeued, "REQUEUED"), (short, "COMPLETED")} <= set(
                SlurmJob.objects.values_list("job_id", "state")):
            break
        time.sleep(0.5)
    by_sacct = _imported_jobs(site)  # with the earlier tests' jobs
    assert (two, "RUNNING", f"gq-res-{r.pk}", 2) in [(j[0], j[4], j[9], j[12]) for j in by_sacct]
    assert [j[4] for j in by_sacct if j[0] == requeued] == ["REQUEUED"]
    assert [j[14] for j in by_sacct if j[0] == two] == [1800]  # its limit, in seconds

    # The same import through slurmrestd, with a token of root's: the same rows.
    url = live.cluster.rest_start()
    backend_config_update(cluster=site.cluster, actor=site.admin, api_url=url,
                          token=live.cluster.token(lifespan_s=600))
    SlurmJob.objects.all().delete()
    ImportCursor.objects.all().delete()
    assert slurm_jobs_import(cluster=site.cluster) == len(by_sacct)
    assert _imported_jobs(site) == by_sacct
    assert _reconcile(site).outcome == "ok"
    caps = Capabilities.objects.get(cluster=site.cluster)
    assert caps.facts["jobs_read_through"] == f"slurmrestd {url}" and not [
        n for n in caps.notes if "slurmrestd" in n]

    # Which GPUs the 2-GPU job has, as slurmctld says (`scontrol -d show job`'s IDX).
    rest = backend_for(site.cluster, BackendConfig.objects.get()).rest
    shown = live.run("scontrol", "-d", "show", "job", two)
    idx = gres_indices(shown.split("JOB_GRES=")[1])
    assert len(idx) == 2
    assert [(g.node, g.index) for g in rest.running_job_gpus() if g.job_id == two] == [
        ("gqnode1", i) for i in idx]
    # ... which the running jobs' import records through slurmrestd as through scontrol.
    running_gpus_import(cluster=site.cluster)
    assert sorted(SlurmJobGpu.objects.filter(job_id=two).values_list("node", "gpu_index")) == [
        ("gqnode1", i) for i in idx]

    # A wrong token, then slurmrestd down: cluster problems, never a crash.
    backend_config_update(cluster=site.cluster, actor=site.admin, token="not-a-jwt")
    done = slurm_clusters_accounting_import()
    assert done["dev"]["error"].startswith("slurmrestd answered an error"), done
    backend_config_update(cluster=site.cluster, actor=site.admin,
                          token=live.cluster.token(lifespan_s=600))
    live.cluster.rest_stop()
    done = slurm_clusters_accounting_import()
    assert done["dev"]["error"] == f"slurmrestd could not be reached at {url}"
    # (The commands got the wrong token too, as SLURM_JWT: the reconcile failed as well.)
    summaries = sorted(Problem.objects.filter(
        cluster=site.cluster, summary__startswith="job import: ").values_list("summary", flat=True))
    assert [s.split(": ")[1].split(" at ")[0] for s in summaries] == [
        "slurmrestd answered an error", "slurmrestd could not be reached"]


def test_the_demo_on_the_dev_cluster_a_reservation_made_in_the_web_pages_holds_in_slurm(live):
    """`make demo SLURM=1`: the demo's seeding against the running dev cluster, then a
    lead's reservation through the web form; the walk-through's own sbatch lines."""
    from django.test import Client
    from django.utils import timezone

    from accounts.models import Team, User
    from gpuquota.demo.organisation import demo_organisation_seed
    from gpuquota.demo.slurm import GPU_CLASS, slurm_demo_jobs, slurm_demo_seed
    from gpuquota.inventory.models import GpuClass
    from gpuquota.reservations.models import Reservation

    demo_organisation_seed()
    cluster = slurm_demo_seed(slurm_conf=live.slurm_conf, now=timezone.now())
    assert cluster_reconcile(cluster=cluster, reason="demo").outcome == "ok"
    lead = Client()
    lead.force_login(User.objects.get(username="vision-lead"))
    start = timezone.localtime().replace(second=0, microsecond=0)
    response = lead.post("/reservations/new/", {
        "team": Team.objects.get(slug="vision").pk,
        "gpu_class": GpuClass.objects.get(name=GPU_CLASS).pk, "count": 4,
        "start": f"{start:%Y-%m-%d %H:%M}", "end": f"{start + timedelta(hours=2):%Y-%m-%d %H:%M}",
        "placement": "any", "purpose": "walk-through"})
    assert response.status_code == 302, re.findall(r'class="errorlist[^>]*>(.*?)</ul>',
                                                   response.content.decode(), re.S)
    r = Reservation.objects.get(purpose="walk-through")
    from gpuquota.core.dispatch import tasks_after_response_wait

    assert tasks_after_response_wait(timeout_s=120)  # the reconcile the form asked for
    assert cluster_reconcile(cluster=cluster, reason="test").outcome == "ok"

    res = live.run("scontrol", "-o", "show", "reservation", f"gq-res-{r.pk}")
    assert "Nodes=gqnode1" in res and "Accounts=vision" in res
    limits = live.run("sacctmgr", "-P", "-n", "show", "association", "cluster=gqdev",
                      "account=vision", "format=account,user,grptres")
    assert "vision||gres/gpu:h100=4" in limits.splitlines()
    page = lead.get("/teams/vision/").content.decode()
    assert "Whole nodes" in page and "the reservation covers gqnode1 whole" in page

    own, other = (live.run("sbatch", "--parsable", *job.argv[1:]).strip()
                  for job in slurm_demo_jobs()[:2])
    assert live.wait_state(own, {"RUNNING"})["NodeList"] == "gqnode1"
    assert live.job(other)["JobState"] == "PENDING"
