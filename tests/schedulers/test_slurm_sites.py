"""The Slurm backend's writes on a cluster set up as sites have it (issue 27), against real
daemons: shape (b) (users with their own QOS list and DefaultQOS=normal, the team accounts
vision and nlp under a site parent, a site QOS `scavenger`). The quota is written and holds,
the export loads into the same result as write mode, and `slurm_reconcile --remove` gives
the site back as it was. One test, so the cluster is put in its shape once; it is left
bare for the next module."""

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from accounts.models import ClusterIdentity
from gpuquota.schedulers.models import BackendConfig, ManagedObject, Problem
from gpuquota.schedulers.reconcile import cluster_plan, cluster_reconcile
from gpuquota.schedulers.services import backend_config_update
from gpuquota.schedulers.slurm.objects import reservations_parse
from tests.factories import QuotaFactory
from tests.schedulers.conftest import Site
from tests.schedulers.slurm_shapes import (
    accounting_settled,
    accounting_snapshot,
    associations,
    shape_b,
    shape_bare,
)

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def shaped(live):
    yield live
    shape_bare(live)  # the next module finds the cluster as it started


def _site(live) -> Site:
    """vision (member `daemon`) and nlp (member `nobody`) in gpuquota, vision granted 4."""
    site = Site(nodes=("gqnode1", "gqnode2"))
    for slug, unix in (("vision", "daemon"), ("speech", "nobody")):
        ClusterIdentity.objects.filter(kind="unix_user", user__memberships__team__slug=slug) \
            .update(key=unix)
    ClusterIdentity.objects.filter(kind="slurm_account", key="speech").update(key="nlp")
    QuotaFactory(team=site.teams["vision"], gpu_class=site.gpu_class, gpus=4)
    backend_config_update(cluster=site.cluster, actor=site.admin,
                          options={"slurm_conf": live.slurm_conf})
    return site


def _state(live) -> dict:
    """The accounting as a site compares it, with the reservations (not their start)."""
    found = accounting_snapshot(live)
    found["reservations"] = sorted(
        (r.name, r.fields["nodes"], r.fields["accounts"], r.fields["endtime"])
        for r in reservations_parse(live.run("scontrol", "-o", "show", "reservation")))
    return found


def test_shape_b_quota_holds_export_loads_the_same_and_remove_gives_the_site_back(
        shaped, tmp_path):
    live = shaped
    site_before = shape_b(live)
    site = _site(live)
    now = timezone.now().replace(microsecond=0)
    site.reserve("vision", site.gpus["gqnode2"], start=now - timedelta(minutes=5),
                 end=now + timedelta(hours=1))

    # Write mode: every write taken (and read back); the run is ok, no problem.
    summary = cluster_reconcile(cluster=site.cluster, reason="test")
    assert summary.outcome == "ok", summary
    assert not Problem.objects.filter(status="open").exists()
    rows = {(a["account"], a["user"]): a for a in associations(live)}
    assert rows[("vision", "")]["grptres"] == "gres/gpu:h100=4"
    assert rows[("vision", "")]["parentname"] == "site"
    assert rows[("vision", "")]["defaultqos"] == "gq-owner"
    # The site's user keeps their own list and default, with gq-owner added.
    assert rows[("vision", "daemon")]["qos"] == "gq-owner,normal,scavenger"
    assert rows[("vision", "daemon")]["defaultqos"] == "normal"
    assert cluster_reconcile(cluster=site.cluster, reason="test").actions == []

    # The quota holds: vision's fifth GPU pends (jobs submitted as the site's users do).
    jobs = [live.sbatch(user="daemon", account="vision") for _ in range(5)]
    for job in jobs[:4]:
        assert live.wait_state(job, {"RUNNING"})["JobState"] == "RUNNING"
    fifth = live.wait_state(jobs[4], {"RUNNING"}, timeout_s=3)
    assert (fifth["JobState"], fifth["Reason"]) == ("PENDING", "AssocGrpGRES")
    live.cancel_all()
    written = _state(live)
    # (Slurm refuses to delete a QOS while its accounting still shows the jobs running.)
    accounting_settled(live)

    # --remove: what gpuquota created is gone, the site's accounts are as they were.
    call_command("slurm_reconcile", "--cluster", "dev", "--remove")
    assert accounting_snapshot(live) == site_before
    assert not reservations_parse(live.run("scontrol", "-o", "show", "reservation"))
    assert BackendConfig.objects.get().mode == "off" and not ManagedObject.objects.exists()

    # Export mode on the same site: the files, run in their order, give what write mode did.
    backend_config_update(cluster=site.cluster, actor=site.admin, mode="export")
    backend, plan = cluster_plan(cluster=site.cluster)
    for name, content in backend.export(plan).items():
        (tmp_path / name).write_text(content)
    assert "gq-created" not in (tmp_path / "accounts.cfg").read_text().split("'vision'")[1] \
        .splitlines()[0]
    for step in (["sh", "qos.sh"], ["sacctmgr", "-i", "load", "file=accounts.cfg"],
                 ["sh", "defaults.sh"], ["sh", "reservations.sh"]):
        done = subprocess.run(step, cwd=tmp_path, env=live.env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0 and "rror" not in done.stderr, (step, done.stdout,
                                                                    done.stderr)
    assert _state(live) == written
    assert not Path(tmp_path / "pwned").exists()
