"""`manage.py slurm_demo`'s refusal where the dev Slurm cluster cannot start, and its seeding
(without Slurm: the live test in tests/schedulers/test_slurm_live.py runs it against the
dev cluster): idempotent, and a reservation of its class lands on its nodes."""

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from accounts.models import ClusterIdentity, Team, User
from gpuquota.demo.organisation import demo_organisation_seed
from gpuquota.demo.slurm import GPU_CLASS, slurm_demo_jobs, slurm_demo_seed
from gpuquota.inventory.models import Gpu, GpuClass
from gpuquota.reservations.services import reservation_create
from gpuquota.schedulers.models import BackendConfig

pytestmark = pytest.mark.django_db


def test_it_refuses_naming_the_packages_when_slurm_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sacctmgr, scontrol, sbatch here
    with pytest.raises(CommandError, match="missing .*sacctmgr.*apt-get install slurmctld "
                                           "slurmd slurmdbd slurm-client munge mariadb-server"):
        call_command("slurm_demo")


def test_the_seeding_is_idempotent_and_its_class_reserves_the_dev_cluster():
    demo_organisation_seed()
    for conf in ("/tmp/a/etc/slurm.conf", "/tmp/b/etc/slurm.conf"):
        cluster = slurm_demo_seed(slurm_conf=conf, now=timezone.now())
    gpus = Gpu.objects.filter(node__cluster=cluster)
    assert sorted((g.node.hostname, g.index) for g in gpus) == [
        (node, i) for node in ("gqnode1", "gqnode2") for i in range(4)]
    assert {g.gpu_class.name for g in gpus} == {GPU_CLASS}
    config = BackendConfig.objects.get(cluster=cluster)
    assert (config.mode, config.options) == (
        "write", {"slurm_conf": "/tmp/b/etc/slurm.conf", "cluster_name": "gqdev"})
    identities = ClusterIdentity.objects.filter(cluster=cluster)
    assert sorted(identities.filter(kind="slurm_account").values_list("key", flat=True)) == [
        "nlp", "robotics", "speech", "vision"]
    assert identities.get(kind="unix_user", key="daemon").user.username == "vision-lead"
    assert identities.count() == 8

    # What gpuquota wrote into the last run's cluster went with it: a new start of the demo
    # (a fresh cluster) is not drift.
    from gpuquota.schedulers.models import ManagedObject

    ManagedObject.objects.create(cluster=cluster, kind="qos", name="gq-owner",
                                 applied_at=timezone.now())
    slurm_demo_seed(slurm_conf="/tmp/b/etc/slurm.conf", now=timezone.now())
    assert not ManagedObject.objects.filter(cluster=cluster).exists()

    now = timezone.now()
    reservation = reservation_create(
        team=Team.objects.get(slug="vision"), gpu_class=GpuClass.objects.get(name=GPU_CLASS),
        count=4, start=now, end=now + timedelta(hours=2),
        requested_by=User.objects.get(username="vision-lead"))
    assert {a.gpu.node.hostname for a in reservation.assignments.all()} == {"gqnode1"}


def test_the_walk_through_jobs_run_as_the_leads_system_users():
    owner, other, borrower, taker = (job.argv for job in slurm_demo_jobs())
    assert ("--uid=daemon", "--account=vision") == owner[1:3] == taker[1:3]
    assert ("--uid=nobody", "--account=nlp") == other[1:3]
    assert "--nodelist=gqnode1" in other and "--nodelist=gqnode1" in taker
    assert {"--account=gq-lending", "--qos=gq-scavenger"} <= set(borrower)
    assert borrower[-1] == "srun sleep 3600"  # 22.05 preempts only srun steps in time
