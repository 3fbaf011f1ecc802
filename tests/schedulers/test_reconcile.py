"""The reconcile loop over the backend interface: idempotence, drift repaired and audited,
failures as cluster problems with an audit of what was done, dry runs, credentials."""

import pytest

from gpuquota.core.models import AuditEntry
from gpuquota.schedulers.models import (
    BackendConfig,
    Drift,
    ManagedObject,
    Problem,
    ReconcileRun,
    ReservationBinding,
)
from gpuquota.schedulers.reconcile import cluster_reconcile, clusters_reconcile
from gpuquota.schedulers.secrets import secret_decrypt
from gpuquota.schedulers.services import backend_config_update
from tests.schedulers import backend_memory as mem
from tests.schedulers.conftest import NOW

pytestmark = pytest.mark.django_db


def test_first_run_creates_owned_objects_and_a_second_changes_nothing(memory):
    r = memory.reserve("vision", memory.gpus["node-a"][:2])
    summary = cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW)
    assert summary.outcome == "ok"
    assert mem.STORE == {
        ("account", "gq-speech"): {"users": "bob"},
        ("account", "gq-vision"): {"users": "alice"},
        ("hold", f"gq-res-{r.pk}"): {"gpus": "2"},
    }
    assert AuditEntry.objects.filter(action="scheduler_create").count() == 3
    assert ReservationBinding.objects.get(reservation=r).level == "quota"
    runs = ReconcileRun.objects.count()

    again = cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW)
    assert (again.outcome, again.actions) == ("ok", [])
    assert ReconcileRun.objects.count() == runs  # nothing happened: no run recorded
    assert BackendConfig.objects.get().last_reconciled_at == NOW


def test_objects_not_ours_are_never_touched(memory):
    mem.STORE[("account", "physics")] = {"users": "carol"}
    cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW)
    assert mem.STORE[("account", "physics")] == {"users": "carol"}


def test_ended_reservation_object_is_deleted(memory):
    r = memory.reserve("vision", memory.gpus["node-a"][:1])
    cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW)
    r.status = "ended"
    r.save()
    summary = cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW)
    assert summary.actions == [f"delete hold gq-res-{r.pk}"]
    assert ("hold", f"gq-res-{r.pk}") not in mem.STORE
    assert not ManagedObject.objects.filter(name=f"gq-res-{r.pk}").exists()


def test_drift_deleted_and_edited_by_hand_is_repaired_and_audited(memory):
    r = memory.reserve("vision", memory.gpus["node-a"][:2])
    cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW)
    del mem.STORE[("hold", f"gq-res-{r.pk}")]
    mem.STORE[("account", "gq-speech")] = {"users": "mallory"}

    summary = cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW)
    assert summary.drift == 2
    assert mem.STORE[("hold", f"gq-res-{r.pk}")] == {"gpus": "2"}
    assert mem.STORE[("account", "gq-speech")] == {"users": "bob"}
    drifts = {d.object_name: d for d in Drift.objects.all()}
    assert drifts[f"gq-res-{r.pk}"].kind == "missing"
    assert drifts["gq-speech"].kind == "changed"
    assert drifts["gq-speech"].observed == {"users": "mallory"}
    assert all(d.repaired_at == NOW for d in drifts.values())
    repairs = AuditEntry.objects.filter(action="scheduler_drift_repair")
    assert {e.changes["name"] for e in repairs} == {f"gq-res-{r.pk}", "gq-speech"}
    assert repairs.get(changes__name="gq-speech").changes["before"] == {"users": "mallory"}


def test_failure_half_way_is_a_problem_with_an_audit_of_what_was_done(memory):
    r = memory.reserve("vision", memory.gpus["node-a"][:1])
    mem.FAIL_ON.add(("hold", f"gq-res-{r.pk}"))
    summary = cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW)
    assert summary.outcome == "partial"
    problem = Problem.objects.get(status="open")
    assert f"create hold gq-res-{r.pk}" in problem.summary and "refused" in problem.summary
    assert problem.detail == "permission denied"
    failed = AuditEntry.objects.get(action="scheduler_reconcile_failed")
    assert failed.changes == {"applied": ["create account gq-speech", "create account gq-vision"],
                              "failed": f"create hold gq-res-{r.pk}"}
    assert set(n for _, n in mem.STORE) == {"gq-speech", "gq-vision"}
    assert not ReservationBinding.objects.exists()  # not held yet: no binding claimed

    cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW)
    assert Problem.objects.get().occurrences == 2  # the same problem, counted
    mem.FAIL_ON.clear()
    assert cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW).outcome == "ok"
    assert Problem.objects.get().status == "resolved"


def test_scheduler_down_never_raises(memory):
    mem.DOWN[0] = True
    result = clusters_reconcile(reason="beat")
    assert result["clusters"]["dev"]["outcome"] == "failed"
    assert Problem.objects.get().summary == "the scheduler does not answer"
    assert ReconcileRun.objects.get().outcome == "failed"


def test_dry_run_renders_commands_and_changes_nothing(memory):
    r = memory.reserve("vision", memory.gpus["node-a"][:1])
    summary = cluster_reconcile(cluster=memory.cluster, reason="test", dry_run=True, at=NOW)
    assert summary.outcome == "dry_run"
    assert mem.STORE == {}
    assert not ManagedObject.objects.exists()
    assert f"mem create hold gq-res-{r.pk} gpus=1" in ReconcileRun.objects.get().commands


def test_export_mode_renders_and_records_drift_without_writing(memory):
    BackendConfig.objects.update(mode=BackendConfig.Mode.EXPORT)
    memory.reserve("vision", memory.gpus["node-a"][:1])
    assert cluster_reconcile(cluster=memory.cluster, reason="t", at=NOW).outcome == "exported"
    assert mem.STORE == {}


def test_off_mode_is_skipped(memory):
    BackendConfig.objects.update(mode=BackendConfig.Mode.OFF)
    assert clusters_reconcile(reason="beat")["clusters"] == {}


def test_config_changes_are_audited_and_the_token_encrypted_never_shown(memory):
    config = backend_config_update(cluster=memory.cluster, actor=memory.admin,
                                   token="s3cret-jwt", api_url="https://slurm.example:6820")
    assert "s3cret" not in config.token_encrypted
    assert secret_decrypt(config.token_encrypted) == "s3cret-jwt"
    entry = AuditEntry.objects.filter(action="scheduler_config_update").first()
    assert entry.changes["token"] == ["(hidden)", "(changed)"]
    assert "s3cret" not in str(entry.changes)
    assert entry.actor == memory.admin


def test_a_reservation_change_reconciles_once_it_commits(
        memory, django_capture_on_commit_callbacks):
    from datetime import timedelta

    from django.utils import timezone

    from gpuquota.reservations.services import reservation_create
    from tests.factories import QuotaFactory

    QuotaFactory(team=memory.teams["vision"], gpu_class=memory.gpu_class, gpus=4)
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        r = reservation_create(team=memory.teams["vision"], gpu_class=memory.gpu_class, count=2,
                               start=now + timedelta(hours=1), end=now + timedelta(hours=3),
                               requested_by=memory.admin, now=now)
    assert mem.STORE[("hold", f"gq-res-{r.pk}")] == {"gpus": "2"}


def test_no_reconcile_is_queued_while_no_cluster_has_a_backend_on(
        site, django_capture_on_commit_callbacks):
    from gpuquota.schedulers.services import schedulers_reconcile_request

    with django_capture_on_commit_callbacks() as queued:
        schedulers_reconcile_request(reason="reservation 1 created")
    assert queued == []
    backend_config_update(cluster=site.cluster, actor=site.admin, mode="off")
    with django_capture_on_commit_callbacks() as queued:
        schedulers_reconcile_request(reason="reservation 1 created")
    assert queued == []
    backend_config_update(cluster=site.cluster, actor=site.admin, mode="write")
    with django_capture_on_commit_callbacks() as queued:
        schedulers_reconcile_request(reason="reservation 1 created")
    assert len(queued) == 1
