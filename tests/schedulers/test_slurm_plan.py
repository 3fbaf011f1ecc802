"""The Slurm backend's plan and commands without Slurm: capability detection and binding
levels for 22.05 and for versions that reserve GPUs, the exact scontrol arguments, quotas,
loans, Slurm's answers parsed, and the runner's failures as clear errors."""

from datetime import timedelta

import pytest

from gpuquota.reservations.models import Loan
from gpuquota.schedulers.backend import Action, BackendError, SchedulerObject
from gpuquota.schedulers.models import BackendConfig, Problem, ReconcileRun
from gpuquota.schedulers.reconcile import cluster_reconcile
from gpuquota.schedulers.runner import Runner
from gpuquota.schedulers.selectors import plan_inputs
from gpuquota.schedulers.services import backend_config_update
from gpuquota.schedulers.slurm.backend import export_flat_file
from gpuquota.schedulers.slurm.capabilities import (
    capabilities_report,
    config_parse,
    node_gres_types,
)
from gpuquota.schedulers.slurm.objects import (
    accounts_parse,
    action_argv,
    hostlist_expand,
    qos_parse,
    reservations_parse,
)
from gpuquota.schedulers.slurm.options import SlurmOptions
from gpuquota.schedulers.slurm.plan import plan_build
from tests.factories import QuotaFactory
from tests.schedulers.conftest import NOW

CONFIG = """Configuration data as of 2026-12-06T02:05:00
AccountingStorageEnforce = associations,limits,qos,safe
AccountingStorageTRES   = cpu,mem,energy,node,billing,gres/gpu,gres/gpu:h100
ClusterName             = gqdev
JobSubmitPlugins        = (null)
PreemptMode             = REQUEUE
PreemptType             = preempt/qos
SelectType              = select/cons_tres
SLURM_VERSION           = {version}
"""
NODES = ("NodeName=node-a Arch=x86_64 Gres=gpu:h100:4(S:0) State=IDLE\n"
         "NodeName=node-b Arch=x86_64 Gres=gpu:h100:4 State=IDLE\n")


def caps(version="22.05.8", **changes):
    config = config_parse(CONFIG.format(version=version))
    config.update(changes)
    return capabilities_report(config, node_gres_types(NODES))


def test_capabilities_of_22_05_allow_whole_nodes_at_best():
    report = caps()
    assert report.version == "22.05.8" and report.best_binding == "whole_nodes"
    assert report.facts["gpu_types"] == ["h100"] and report.facts["limits_enforced"]
    assert report.facts["select_type"] == "select/cons_tres" and report.facts["preemption"]
    assert any("cannot reserve GPUs" in n for n in report.notes)
    assert any("job_submit/lua" in n for n in report.notes)


def test_capabilities_from_23_11_reserve_gpus_with_the_leak_noted_before_25_05_3():
    assert caps("23.11.4").best_binding == "exact_gpus"
    assert any("25.05.3" in n for n in caps("24.05.1").notes)
    assert not any("leak" in n for n in caps("25.05.3").notes)


def test_not_a_slurm_answer_is_a_clear_error():
    with pytest.raises(BackendError, match="no SLURM_VERSION"):
        config_parse("<html>proxy error</html>")


def _plan(site, report=None, at=NOW, **options):
    inputs = plan_inputs(cluster=site.cluster, at=at)
    return plan_build(inputs=inputs, caps=report or caps(), options=SlurmOptions(**options),
                      at=at)


def _objects(plan):
    return {o.key: dict(o.fields) for o in plan.objects}


@pytest.mark.django_db
def test_a_whole_node_is_held_by_a_node_reservation(site):
    r = site.reserve("vision", site.gpus["node-a"])
    plan = _plan(site)
    binding = plan.bindings[r.pk]
    assert binding.level == "whole_nodes" and "node-a whole" in binding.why
    fields = _objects(plan)[("reservation", f"gq-res-{r.pk}")]
    assert fields == {"nodes": "node-a", "accounts": "vision", "flags": "MAGNETIC",
                      "endtime": r.end.strftime("%Y-%m-%dT%H:%M:%S")}
    assert _objects(plan)[("account", "vision")]["grptres"] == "gres/gpu:h100=4"


@pytest.mark.django_db
def test_gpus_sharing_a_node_are_held_by_quota_only(site):
    r = site.reserve("vision", site.gpus["node-a"][:2])
    plan = _plan(site)
    assert plan.bindings[r.pk].level == "quota"
    assert "GrpTRES gres/gpu:h100" in plan.bindings[r.pk].why
    assert ("reservation", f"gq-res-{r.pk}") not in _objects(plan)


@pytest.mark.django_db
def test_without_enforced_limits_or_an_account_nothing_holds_and_says_why(site):
    r = site.reserve("vision", site.gpus["node-a"][:2])
    plan = _plan(site, caps(enforce="associations"))
    assert plan.bindings[r.pk].level == "advisory"
    assert "AccountingStorageEnforce has no 'limits'" in plan.bindings[r.pk].why
    site.teams["vision"].cluster_identities.all().delete()
    assert "no Slurm account" in _plan(site).bindings[r.pk].why


@pytest.mark.django_db
def test_exact_gpus_from_23_11_with_the_exact_scontrol_arguments(site):
    r = site.reserve("vision", site.gpus["node-a"][:2], start=NOW + timedelta(hours=1),
                     end=NOW + timedelta(hours=3))
    plan = _plan(site, caps("23.11.4"))
    assert plan.bindings[r.pk].level == "exact_gpus"
    obj = next(o for o in plan.objects if o.kind == "reservation")
    assert action_argv(Action("create", obj), cluster="dev") == [[
        "scontrol", "create", "reservation", f"ReservationName=gq-res-{r.pk}",
        "StartTime=2026-12-01T11:00:00", "EndTime=2026-12-01T13:00:00", "Nodes=node-a",
        "TRES=gres/gpu:h100=2", "Accounts=vision", "Flags=MAGNETIC,IGNORE_JOBS",
    ]]


@pytest.mark.django_db
def test_grptres_is_what_the_team_holds_now_reserved_or_granted(site):
    QuotaFactory(team=site.teams["speech"], gpu_class=site.gpu_class, gpus=3)
    site.reserve("vision", site.gpus["node-b"][:2])
    site.reserve("vision", site.gpus["node-a"][:1], start=NOW + timedelta(hours=5),
                 end=NOW + timedelta(hours=6))  # not yet: not counted
    objects = _objects(_plan(site, gres_types={"H100-80GB": "h100"}))
    assert objects[("account", "vision")]["grptres"] == "gres/gpu:h100=2"
    assert objects[("account", "speech")]["grptres"] == "gres/gpu:h100=3"
    assert ("association", "vision/alice") in objects
    assert ("association", "gq-lending/bob") in objects


@pytest.mark.django_db
def test_a_lent_gpu_opens_its_reservation_to_the_scavenger_qos(site):
    r = site.reserve("vision", site.gpus["node-a"])
    gpu = site.gpus["node-a"][0]
    Loan.objects.create(assignment=r.assignments.get(gpu=gpu), gpu=gpu,
                        lent_from=NOW - timedelta(minutes=5))
    objects = _objects(_plan(site, loan_grace_s=300))
    assert objects[("reservation", f"gq-res-{r.pk}")]["accounts"] == "gq-lending,vision"
    assert objects[("preemptible_qos", "gq-scavenger")] == {
        "preemptmode": "REQUEUE", "gracetime": "00:05:00", "grptres": "gres/gpu:h100=1"}
    assert objects[("qos", "gq-owner")] == {"preempt": "gq-scavenger"}
    assert objects[("default_qos", "vision")]["defaultqos"] == "gq-owner"
    assert objects[("association", "vision/alice")] == {"gq_qos": "gq-owner"}


def test_slurm_answers_parsed():
    assert hostlist_expand("gqnode[1-2],gpu[07-08,10],login") == [
        "gqnode1", "gqnode2", "gpu07", "gpu08", "gpu10", "login"]
    [res] = reservations_parse(
        "ReservationName=gq-res-7 StartTime=2026-12-06T02:05:09 EndTime=2026-12-06T03:05:08 "
        "Nodes=gqnode[1-2] Flags=IGNORE_JOBS,SPEC_NODES,MAGNETIC TRES=cpu=64 "
        "Accounts=vision,gq-lending\nReservationName=maint Nodes=gqnode3\n")
    assert res.fields == {"nodes": "gqnode1,gqnode2", "accounts": "gq-lending,vision",
                          "starttime": "2026-12-06T02:05:09", "endtime": "2026-12-06T03:05:08",
                          "flags": "MAGNETIC"}
    assert qos_parse("normal||cluster|00:00:00|\ngq-scavenger||requeue|00:05:00|"
                     "cpu=4,gres/gpu:h100=1\n")[0].fields == {
        "preemptmode": "REQUEUE", "gracetime": "00:05:00", "grptres": "gres/gpu:h100=1"}
    objects = accounts_parse(
        "vision||cpu=10,gres/gpu:h100=4|gq-owner,normal|gq-owner\nvision|alice||normal|\n")
    assert [(o.kind, o.name, o.fields) for o in objects] == [
        ("account", "vision", {"gq_qos": "gq-owner", "grptres": "gres/gpu:h100=4"}),
        ("default_qos", "vision", {"defaultqos": "gq-owner"}),
        ("association", "vision/alice", {"gq_qos": ""})]
    with pytest.raises(BackendError, match="malformed"):
        qos_parse("garbage without pipes")


def test_updates_touch_only_what_changed():
    obj = SchedulerObject("account", "vision", {"grptres": "gres/gpu:h100=2",
                                                "gq_qos": "gq-owner", "defaultqos": "gq-owner"})
    before = {"grptres": "gres/gpu:h100=4", "gq_qos": "gq-owner", "defaultqos": "gq-owner"}
    assert action_argv(Action("update", obj, before), cluster="c") == [[
        "sacctmgr", "-i", "modify", "account", "where", "name=vision", "cluster=c", "set",
        "grptres=gres/gpu:h100=2"]]


def test_export_is_a_sacctmgr_flat_file_with_every_value_quoted():
    from gpuquota.schedulers.backend import Plan

    plan = Plan(at=NOW, objects=[
        SchedulerObject("account", "vision", {"grptres": "gres/gpu:h100=4", "gq_qos": "gq-owner"}),
        SchedulerObject("default_qos", "vision", {"defaultqos": "gq-owner"}),
        SchedulerObject("account", "gq-lending", {"gq_qos": "gq-scavenger"}),
        SchedulerObject("association", "vision/o'brien", {"gq_qos": "gq-owner"}),
    ])
    # GrpTRES quoted (the flat file's fields split at `:`), a quote in a value escaped by the
    # other quote, and the site's own account (vision) never marked as gpuquota's.
    assert export_flat_file(plan, cluster="gqdev", parents={"vision": "site"}).splitlines(
    )[1:] == [
        "Cluster - 'gqdev'", "Parent - 'root'",
        "Account - 'gq-lending':Description='gq-created':Organization='gpuquota':"
        "QOS='+gq-scavenger'",
        "Parent - 'site'",  # the site's account stays where the site put it
        "Account - 'vision':GrpTRES='gres/gpu:h100=4':QOS='+gq-owner':DefaultQOS='gq-owner'",
        "Parent - 'vision'", "User - \"o'brien\":QOS='+gq-owner'",
    ]


def test_the_runner_turns_every_failure_into_a_clear_error():
    with pytest.raises(BackendError, match="scontrol not found in /nonexistent"):
        Runner(commands_dir="/nonexistent").run(["scontrol", "ping"])
    with pytest.raises(BackendError, match="sh exited with 3: oops") as exc:
        Runner().run(["sh", "-c", "echo oops >&2; exit 3"])
    assert "$ sh -c" in exc.value.detail
    with pytest.raises(BackendError, match="did not answer within 0.3 s"):
        Runner(timeout_s=0.3).run(["sleep", "5"])
    with pytest.raises(TypeError):
        Runner().run("scontrol ping")


@pytest.mark.django_db
def test_slurm_commands_missing_is_a_cluster_problem_not_a_crash(site, tmp_path):
    backend_config_update(cluster=site.cluster, actor=site.admin, commands_dir=str(tmp_path))
    summary = cluster_reconcile(cluster=site.cluster, reason="test")
    assert summary.outcome == "failed"
    assert Problem.objects.get(status="open").summary == f"scontrol not found in {tmp_path}"
    assert ReconcileRun.objects.filter(outcome="failed").exists()
    assert BackendConfig.objects.get().last_reconciled_at is None  # never reconciled yet


@pytest.mark.django_db
def test_unknown_options_are_refused_with_the_field(site):
    from gpuquota.core.errors import DomainError

    with pytest.raises(DomainError) as exc:
        SlurmOptions.parse({"gres_type": "h100"})
    assert exc.value.field == "options"
