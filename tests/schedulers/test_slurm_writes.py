"""The Slurm backend's write side without daemons (issue 27): every write read back, a
refusal that exits 0 a problem naming the command, Slurm's words and the fix, limits sent
apart from QOS, ownership recorded when gpuquota creates, `--remove`, exports a site can run,
names that cannot split, and the smaller points (one problem per outage, no empty GrpTRES,
`busy` never a silent success, commands' output logged at DEBUG only)."""

import logging
import shlex
import zlib

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from accounts.models import ClusterIdentity
from accounts.services import identity_save
from gpuquota.schedulers.backend import Action, BackendError, SchedulerObject
from gpuquota.schedulers.models import BackendConfig, Drift, ManagedObject, Problem, ReconcileRun
from gpuquota.schedulers.reconcile import cluster_plan, cluster_reconcile, cluster_remove
from gpuquota.schedulers.runner import OUTAGE, Runner
from gpuquota.schedulers.services import backend_config_update
from gpuquota.schedulers.slurm import backend as slurm_backend
from gpuquota.schedulers.slurm.jobs import job_fields, slurm_clusters_accounting_import
from gpuquota.schedulers.slurm.objects import action_argv
from tests.factories import QuotaFactory
from tests.schedulers.fake_slurm import FakeSlurm

pytestmark = pytest.mark.django_db


@pytest.fixture
def slurm(site, monkeypatch):
    """The site's cluster on a fake Slurm in shape (b): vision and speech exist under a site
    parent; their users (alice, and carol whom gpuquota does not know) have their own QOS
    list with DefaultQOS=normal."""
    fake = FakeSlurm()
    monkeypatch.setattr(slurm_backend, "Runner", lambda **kwargs: fake)
    fake.assoc[("site", "")] = {"parent": "root", "qos": None, "defaultqos": "", "grptres": ""}
    for account, users in (("vision", ("alice", "carol")), ("speech", ("bob",))):
        fake.assoc[(account, "")] = {"parent": "site", "qos": None, "defaultqos": "",
                                     "grptres": ""}
        for user in users:
            fake.assoc[(account, user)] = {"parent": "", "qos": ["normal", "scavenger"],
                                           "defaultqos": "normal", "grptres": ""}
    QuotaFactory(team=site.teams["vision"], gpu_class=site.gpu_class, gpus=4)
    backend_config_update(cluster=site.cluster, actor=site.admin)
    site.fake = fake
    return site


def _reconcile(site, **kwargs):
    return cluster_reconcile(cluster=site.cluster, reason="test", **kwargs)


def test_a_refusal_with_exit_0_is_a_problem_and_the_limit_is_written_apart(slurm):
    fake = slurm.fake
    first = _reconcile(slurm)
    # carol (not a member gpuquota knows) has her own QOS list without gq-owner: Slurm
    # refuses vision's default QOS with exit status 0. The run is not `ok`...
    assert first.outcome == "partial", first
    problem = Problem.objects.get(status="open")
    assert problem.summary.startswith(
        "update default_qos vision: Slurm refused `sacctmgr -i modify account where "
        "name=vision cluster=gqdev set defaultqos=gq-owner`: These associations don't have "
        "access to their default qos. Fix: ")
    assert "sacctmgr modify user where account=vision set qos+=gq-owner" in problem.detail
    assert "Fix: " in problem.detail and "Read back: {'defaultqos': ''}" in problem.detail
    # ... and the limit was sent apart, so vision's quota holds; alice (a member) may use
    # gq-owner, and her own list is kept.
    assert fake.assoc[("vision", "")]["grptres"] == "gres/gpu:h100=4"
    assert fake.assoc[("vision", "alice")]["qos"] == ["gq-owner", "normal", "scavenger"]
    assert fake.assoc[("speech", "")]["grptres"] == "gres/gpu:h100=0"
    assert fake.assoc[("speech", "")]["defaultqos"] == "gq-owner"  # bob is a member
    # The next runs record no drift: Slurm keeping its value is not someone else's edit.
    for _ in range(2):
        again = _reconcile(slurm)
        assert again.outcome == "partial" and again.drift == 0, again
    assert not Drift.objects.exists()
    assert Problem.objects.get(status="open").occurrences == 3
    # Once carol may use gq-owner, it takes and the problem is resolved.
    fake.assoc[("vision", "carol")]["qos"].append("gq-owner")
    assert _reconcile(slurm).outcome == "ok"
    assert fake.assoc[("vision", "")]["defaultqos"] == "gq-owner"
    assert not Problem.objects.filter(status="open").exists()


def test_a_write_that_does_not_read_back_is_refused_even_when_slurm_says_nothing(slurm):
    backend = cluster_plan(cluster=slurm.cluster)[0]
    slurm.fake._modify = lambda *args: ("", "", 0)  # says nothing, changes nothing
    with pytest.raises(BackendError, match="it reads back unchanged") as exc:
        backend.apply_action(Action("update", SchedulerObject(
            "account", "vision", {"grptres": "gres/gpu:h100=4"}), {"grptres": ""}))
    assert "slurmdbd's log" in exc.value.message and exc.value.took == {"grptres": ""}


def test_a_site_qos_made_to_preempt_the_scavenger_is_read_back(slurm):
    backend = cluster_plan(cluster=slurm.cluster)[0]
    obj = SchedulerObject("site_qos", "normal", {"preempts": "gq-scavenger"})
    backend.apply_action(Action("create", obj))
    assert slurm.fake.qos["normal"]["preempt"] == "gq-scavenger"
    backend.apply_action(Action("delete", obj, dict(obj.fields)))
    assert slurm.fake.qos["normal"]["preempt"] == ""


def test_owned_means_created_by_gpuquota_and_remove_gives_the_site_back(slurm):
    fake = slurm.fake
    fake.assoc[("vision", "carol")]["qos"].append("gq-owner")
    # A site account that a flat file labelled as gpuquota's: not created by gpuquota,
    # never deleted.
    fake.assoc[("physics", "")] = {"parent": "root", "qos": None, "defaultqos": "",
                                   "grptres": "", "description": "gq-created"}
    def effective():  # each association's settings, its QOS as Slurm shows them
        return {k: dict(v, qos=fake._qos_of(*k)) for k, v in fake.assoc.items()}

    site_before = effective()
    assert _reconcile(slurm).outcome == "ok"
    created = set(ManagedObject.objects.filter(created=True).values_list("kind", "name"))
    assert {("account", "gq-lending"), ("qos", "gq-owner"), ("association", "gq-lending/alice"),
            ("preemptible_qos", "gq-scavenger")} <= created
    assert not {("account", "vision"), ("association", "vision/alice")} & created
    assert ManagedObject.objects.get(kind="account", name="vision").site_fields == {
        "grptres": "", "gq_qos": ""}
    assert _reconcile(slurm).actions == []
    assert ("physics", "") in fake.assoc

    summary = cluster_remove(cluster=slurm.cluster)
    assert summary.outcome == "ok", summary
    assert effective() == site_before and set(fake.qos) == {"normal"}
    assert BackendConfig.objects.get().mode == "off" and not ManagedObject.objects.exists()
    assert not any(argv[:3] == ["sacctmgr", "-i", "delete"] and "account" in argv
                   and "name=vision" in argv for argv in fake.ran)


def test_export_runs_in_order_every_value_quoted(slurm):
    from django.utils import timezone

    now = timezone.now()
    slurm.reserve("vision", slurm.gpus["node-a"], start=now, end=now.replace(year=now.year + 1))
    backend, plan = cluster_plan(cluster=slurm.cluster)
    files = backend.export(plan)
    qos = files["qos.sh"].splitlines()
    assert [line.split()[4] for line in qos if line.startswith("sacctmgr -i add")] == [
        "gq-scavenger", "gq-owner"]  # the preempted QOS exists before the one preempting it
    # ... and before the site's QOS its users default to is made to preempt it (owners.py)
    assert [line for line in qos if line.startswith("sacctmgr")][-1] == (
        "sacctmgr -i modify qos where name=normal set preempt+=gq-scavenger")
    for line in files["reservations.sh"].splitlines():
        if line.startswith("scontrol"):
            assert shlex.join(shlex.split(line)) == line
    assert "Account - 'vision':GrpTRES='gres/gpu:h100=4'" in files["accounts.cfg"]
    assert "gq-created" not in files["accounts.cfg"].split("Account - 'vision'")[1].split("\n")[0]


def test_names_that_would_split_never_reach_a_command(slurm):
    for bad in ("eve,root", "vision nlp", "$(touch pwned)", "-x", "o'brien", "a;b"):
        with pytest.raises(BackendError, match="split into several objects"):
            action_argv(Action("create", SchedulerObject("association", f"vision/{bad}")),
                        cluster="dev")
    cluster = slurm.cluster
    team, user = slurm.teams["vision"], slurm.admin
    for kind, key, why in (
            ("slurm_account", "vision,nlp", "may hold only"),
            ("slurm_account", "gq-lending", "may not start with 'gq-'"),
            ("slurm_account", "root", "Slurm keeps it"),
            ("slurm_account", "$(touch pwned)", "may hold only"),
            ("unix_user", "zed,root", "may hold only"),
            ("unix_user", "-rf", "may not start with '-'"),
            ("unix_user", "root", "may not be 'root'")):
        identity = ClusterIdentity(cluster=cluster, kind=kind, key=key, valid_from=slurm.admin
                                   .date_joined, **({"team": team} if kind == "slurm_account"
                                                    else {"user": user}))
        with pytest.raises(ValidationError, match=why):
            identity_save(identity=identity, actor=user)
    # A bad name already in the database (from before) is left out of the plan.
    ClusterIdentity.objects.filter(key="vision").update(key="vision,nlp")
    _backend, plan = cluster_plan(cluster=slurm.cluster)
    assert not [o for o in plan.objects if "," in o.name]


def test_backend_options_that_reach_commands_are_names(slurm):
    from gpuquota.core.errors import DomainError

    for options in ({"cluster_name": "gqdev,other"}, {"node_names": {"a": "n1 n2"}},
                    {"gres_types": {"H100-80GB": "h100=9"}}, {"rest_user": "-root"},
                    {"reservation_flags": "MAGNETIC;reboot"}):
        with pytest.raises(DomainError, match="no Slurm name|flag names") as exc:
            backend_config_update(cluster=slurm.cluster, actor=slurm.admin, options=options)
        assert exc.value.field == "options"


def test_one_outage_is_one_problem(slurm):
    slurm.fake.down = True
    assert _reconcile(slurm).outcome == "failed"
    slurm_clusters_accounting_import()
    _reconcile(slurm)
    [problem] = Problem.objects.filter(status="open")
    assert problem.summary == OUTAGE and problem.occurrences == 3


def test_no_empty_grptres_before_the_first_gpu(slurm):
    from gpuquota.inventory.models import Gpu, GpuClassInterval, GpuNodeInterval

    GpuClassInterval.objects.all().delete()
    GpuNodeInterval.objects.all().delete()
    Gpu.objects.all().delete()
    _reconcile(slurm, dry_run=True)
    commands = ReconcileRun.objects.get(outcome="dry_run").commands
    assert commands and not [c for c in commands if "grptres=" in c.replace("'", "")
                             and c.rstrip("'").endswith("grptres=")]
    assert not [c for c in commands if c.endswith("grptres=") or "grptres= " in c]


@pytest.mark.django_db(transaction=True)
def test_slurm_reconcile_while_another_runs_waits_then_fails_clearly(slurm):
    from django.db import connections

    slurm.fake.assoc[("vision", "carol")]["qos"].append("gq-owner")
    other = connections.create_connection("default")
    key = zlib.crc32(f"gpuquota.schedulers:{slurm.cluster.pk}".encode())
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [key])
    try:
        with pytest.raises(CommandError, match="another reconcile is still running"):
            call_command("slurm_reconcile", "--cluster", "dev", "--wait", "0.4")
    finally:
        other.close()
    call_command("slurm_reconcile", "--cluster", "dev", "--wait", "5")


def test_commands_output_is_logged_at_debug_only(caplog):
    with caplog.at_level(logging.INFO, logger="gpuquota.schedulers.runner"):
        Runner().run(["printf", "%s-%s", "carol", "bob"])
    assert caplog.records and "carol-bob" not in caplog.text
    with caplog.at_level(logging.DEBUG, logger="gpuquota.schedulers.runner"):
        Runner().run(["printf", "%s-%s", "carol", "bob"])
    assert "carol-bob" in caplog.text


def test_a_job_that_never_started_has_no_nodes():
    fields = job_fields({"job_id": 7, "state": {"current": ["PENDING"]},
                         "time": {"submission": 1764583200, "start": 0, "end": 0},
                         "nodes": "None assigned"})
    assert fields["nodes"] == ""
