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
from gpuquota.schedulers.models import (
    BackendConfig,
    Drift,
    LoanReturn,
    ReservationBinding,
    SlurmJob,
)
from gpuquota.schedulers.reconcile import cluster_reconcile
from gpuquota.schedulers.services import backend_config_update
from gpuquota.schedulers.slurm.jobs import loan_returns_record, slurm_jobs_import
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
    """Import Slurm's accounting until it has the owner's job (slurmctld sends it to
    slurmdbd a moment later), then record the returns; the owner job's time-to-return."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        slurm_jobs_import(cluster=site.cluster)
        if SlurmJob.objects.filter(job_id=owner_job, started_at__isnull=False).exists():
            break
        time.sleep(0.5)
    return [x.time_to_return_s for x in loan_returns_record(cluster=site.cluster)
            if x.owner_job_id == owner_job]


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
    for _ in range(3):
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
    # Jobs on the reservation: Slurm's accounting names it (mapped from its id).
    assert SlurmJob.objects.filter(reservation=f"gq-res-{r.pk}", team=site.teams["vision"]).exists()


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
