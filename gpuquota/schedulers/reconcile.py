"""The reconcile loop: for each cluster with a backend, detect capabilities, plan, observe,
record drift, then apply the difference (or render it, for a dry run or an export).

Idempotent: a second run finds nothing to do. Never raises for the scheduler's sake: a
failure becomes an open `Problem` on the cluster and a run `failed` or `partial`, and
every action applied is audited in its own transaction as it is done, so a plan stopped
half-way says exactly what was done.
"""

from __future__ import annotations

import logging
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Cluster
from gpuquota.schedulers.backend import (
    Action,
    Backend,
    BackendError,
    CapabilityReport,
    Observed,
    Plan,
    backend_for,
)
from gpuquota.schedulers.models import (
    BackendConfig,
    Capabilities,
    Drift,
    ManagedObject,
    ReconcileRun,
    ReservationBinding,
)
from gpuquota.schedulers.services import problem_record, problems_resolve

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    cluster: str
    outcome: str
    actions: list[str] = field(default_factory=list)
    drift: int = 0
    error: str = ""

    def as_dict(self) -> dict:
        return {"outcome": self.outcome, "actions": self.actions, "drift": self.drift,
                "error": self.error}


def clusters_reconcile(*, reason: str) -> dict:
    """Reconcile every cluster that has a scheduler backend switched on; a summary per
    cluster. One cluster's failure never stops the others."""
    summaries = {}
    configs = BackendConfig.objects.exclude(mode=BackendConfig.Mode.OFF).select_related("cluster")
    for config in configs.order_by("cluster__name"):
        summary = cluster_reconcile(cluster=config.cluster, reason=reason, wait_s=0)
        summaries[config.cluster.slug] = summary.as_dict()
    return {"reason": reason, "clusters": summaries}


def cluster_reconcile(
    *, cluster: Cluster, reason: str, dry_run: bool = False, at: datetime | None = None,
    wait_s: float = 60,
) -> RunSummary:
    """One reconcile pass over one cluster. `dry_run` (or the cluster's export mode) only
    renders the actions as commands; nothing is changed on the scheduler. It waits up to
    `wait_s` seconds for another reconcile of the cluster (one queued when its
    configuration was saved); `busy` when that one still runs (the beat does not wait:
    its next tick comes)."""
    config = BackendConfig.objects.filter(cluster=cluster).first()
    backend = backend_for(cluster, config) if config else None
    if backend is None or (config.mode == BackendConfig.Mode.OFF and not dry_run):
        return RunSummary(cluster=cluster.slug, outcome="skipped")
    with _cluster_lock(cluster, wait_s=wait_s) as locked:
        if not locked:
            return RunSummary(cluster=cluster.slug, outcome="busy")
        return _reconcile(backend=backend, config=config, reason=reason,
                          render_only=dry_run or config.mode == BackendConfig.Mode.EXPORT,
                          dry_run=dry_run, at=at or timezone.now())


def cluster_plan(*, cluster: Cluster, at: datetime | None = None) -> tuple[Backend, Plan]:
    """The backend and its plan at `at`, for an export (nothing observed or changed)."""
    config = BackendConfig.objects.get(cluster=cluster)
    backend = backend_for(cluster, config)
    if backend is None:
        raise BackendError(f"The cluster's scheduler ({cluster.scheduler}) has no backend.")
    return backend, backend.plan(at or timezone.now(), capabilities=backend.capabilities())


def cluster_remove(*, cluster: Cluster, wait_s: float = 0) -> RunSummary:
    """Take gpuquota off the cluster (`slurm_reconcile --remove`): every object it created
    deleted, every setting it changed on the site's own objects put back, each verified;
    then its backend is switched off, so nothing is written again."""
    config = BackendConfig.objects.filter(cluster=cluster).first()
    backend = backend_for(cluster, config) if config else None
    if backend is None or not hasattr(backend, "remove_actions"):
        return RunSummary(cluster=cluster.slug, outcome="skipped")
    with _cluster_lock(cluster, wait_s=wait_s) as locked:
        if not locked:
            return RunSummary(cluster=cluster.slug, outcome="busy")
        at = timezone.now()
        run = ReconcileRun.objects.create(cluster=cluster, reason="remove", started_at=at)
        summary = RunSummary(cluster=cluster.slug, outcome="")
        try:
            actions = backend.remove_actions()
        except BackendError as exc:
            return _fail(run, summary, exc, applied=[])
        summary.actions = [str(a) for a in actions]
        run.commands = backend.render(actions)
        result = backend.apply(actions, on_applied=lambda a: _removed_record(run, cluster, a))
        BackendConfig.objects.filter(pk=config.pk).update(mode=BackendConfig.Mode.OFF)
        audit_record(actor=None, action="scheduler_config_update", obj=config,
                     changes={"mode": [config.mode, BackendConfig.Mode.OFF]},
                     reason="slurm_reconcile --remove")
        if result.error is not None:
            for action, error in result.refused[1:]:
                problem_record(cluster=cluster, summary=f"{action}: {error.message}",
                               detail=error.detail)
            return _fail(run, summary, result.error, applied=result.applied,
                         failed=result.failed, refused=len(result.refused))
        problems_resolve(cluster=cluster)
        # What went with another (an account's default QOS) or was already gone.
        ManagedObject.objects.filter(cluster=cluster).delete()
        run.applied, run.outcome = len(result.applied), ReconcileRun.Outcome.OK
        return _finish(run, summary, config)


def _removed_record(run: ReconcileRun, cluster: Cluster, action: Action) -> None:
    obj = action.obj
    with transaction.atomic():
        ManagedObject.objects.filter(cluster=cluster, kind=obj.kind, name=obj.name).delete()
        audit_record(actor=None, action="scheduler_remove", obj=run, changes={
            "kind": obj.kind, "name": obj.name, "verb": action.verb,
            "fields": dict(obj.fields), "before": dict(action.before)},
            reason=f"{cluster.slug}: {action}")


def _reconcile(*, backend: Backend, config, reason: str, render_only: bool, dry_run: bool,
               at: datetime) -> RunSummary:
    cluster = backend.cluster
    run = ReconcileRun.objects.create(cluster=cluster, reason=reason[:128], started_at=at)
    summary = RunSummary(cluster=cluster.slug, outcome="")
    try:
        caps = backend.capabilities()
        plan = backend.plan(at, capabilities=caps)
        observed = backend.observe()
        actions = backend.diff(plan, observed)
    except BackendError as exc:
        return _fail(run, summary, exc, applied=[])
    if not dry_run:
        _capabilities_store(cluster, caps, at)
    summary.actions = [str(a) for a in actions]
    run.commands = backend.render(actions)
    drifts = _drift_record(cluster, observed, at) if not dry_run else []
    summary.drift = len(drifts)
    if render_only:
        run.outcome = ReconcileRun.Outcome.DRY_RUN if dry_run else ReconcileRun.Outcome.EXPORTED
        if not dry_run:
            _bindings_store(plan, at)
        return _finish(run, summary, config)
    result = backend.apply(
        actions, on_applied=lambda action: _applied_record(run, cluster, action, at, drifts)
    )
    if result.error is not None:
        if backend.independent_objects:  # the rest of the plan is applied: it binds, and
            _bindings_store(plan, at)    # only the refusals of this run stay problems
            problems_resolve(cluster=cluster, keep=[
                f"{action}: {error.message}" for action, error in result.refused])
        for action, error in result.refused[1:]:  # the first is the run's own problem
            problem_record(cluster=cluster, summary=f"{action}: {error.message}",
                           detail=error.detail)
        in_place = backend.independent_objects and len(plan.objects) > len(result.refused)
        return _fail(run, summary, result.error, applied=result.applied, failed=result.failed,
                     refused=len(result.refused), partial=in_place)
    _bindings_store(plan, at)
    problems_resolve(cluster=cluster)
    run.applied = len(result.applied)
    run.outcome = ReconcileRun.Outcome.OK
    if not actions and not drifts:
        run.delete()  # nothing happened: no run recorded, only the time of the last look
        summary.outcome = ReconcileRun.Outcome.OK
        BackendConfig.objects.filter(pk=config.pk).update(last_reconciled_at=at)
        return summary
    return _finish(run, summary, config)


def _finish(run: ReconcileRun, summary: RunSummary, config) -> RunSummary:
    run.finished_at = timezone.now()
    run.save()
    summary.outcome = run.outcome
    BackendConfig.objects.filter(pk=config.pk).update(last_reconciled_at=run.started_at)
    return summary


def _fail(run: ReconcileRun, summary: RunSummary, error: BackendError, *,
          applied: list[Action], failed: Action | None = None, refused: int = 1,
          partial: bool = False) -> RunSummary:
    """A clear problem on the cluster, the run marked (`partial` where something was applied
    or the rest of the plan is in place), and an audit entry naming what was applied before
    the failure and what failed (the first of `refused` refusals)."""
    cluster = run.cluster
    what = f"{failed}: " if failed else ""
    problem_record(cluster=cluster, summary=f"{what}{error.message}", detail=error.detail)
    if refused > 1:
        what = f"{refused} actions refused, the others applied; first {what}"
    run.outcome = (ReconcileRun.Outcome.PARTIAL if applied or partial
                   else ReconcileRun.Outcome.FAILED)
    run.applied = len(applied)
    run.error = f"{what}{error.message}"
    run.finished_at = timezone.now()
    run.save()
    audit_record(actor=None, action="scheduler_reconcile_failed", obj=run, changes={
        "applied": [str(a) for a in applied], "failed": str(failed) if failed else "",
    }, reason=run.error)
    log.warning("reconcile of %s %s: %s", cluster.slug, run.outcome, run.error)
    summary.outcome, summary.error = run.outcome, run.error
    return summary


def _capabilities_store(cluster: Cluster, caps: CapabilityReport, at: datetime) -> None:
    Capabilities.objects.update_or_create(cluster=cluster, defaults={
        "detected_at": at, "version": caps.version, "best_binding": caps.best_binding,
        "facts": dict(caps.facts), "notes": list(caps.notes),
    })


def _drift_record(cluster: Cluster, observed: Observed, at: datetime) -> list[Drift]:
    """A Drift for each object we applied that is now missing or edited by someone else
    (one open record per object until it is repaired)."""
    seen = {(o.kind, o.name): o for o in observed.objects}
    drifts = []
    for managed in ManagedObject.objects.filter(cluster=cluster):
        current = seen.get((managed.kind, managed.name))
        if current is None:
            kind, now_fields = Drift.Kind.MISSING, {}
        elif any(current.fields.get(k) != v for k, v in managed.fields.items()):
            kind, now_fields = Drift.Kind.CHANGED, dict(current.fields)
        else:
            continue
        drift = Drift.objects.filter(
            cluster=cluster, object_kind=managed.kind, object_name=managed.name,
            repaired_at__isnull=True,
        ).first() or Drift.objects.create(
            cluster=cluster, kind=kind, object_kind=managed.kind, object_name=managed.name,
            expected=managed.fields, observed=now_fields, detected_at=at,
        )
        drifts.append(drift)
    return drifts


def _applied_record(run: ReconcileRun, cluster: Cluster, action: Action, at: datetime,
                    drifts: list[Drift]) -> None:
    """The managed object as now applied, its drift repaired, and one audit entry."""
    obj = action.obj
    with transaction.atomic():
        if action.verb == "delete":
            ManagedObject.objects.filter(cluster=cluster, kind=obj.kind, name=obj.name).delete()
        else:
            managed, made = ManagedObject.objects.get_or_create(
                cluster=cluster, kind=obj.kind, name=obj.name, defaults={
                    "fields": dict(obj.fields), "applied_at": at,
                    "created": action.verb == "create",
                    # a site's object: its settings before gpuquota's first write
                    "site_fields": {} if action.verb == "create" else {
                        k: action.before.get(k, "") for k in obj.fields}})
            if not made:
                managed.fields, managed.applied_at = dict(obj.fields), at
                managed.created = managed.created or action.verb == "create"
                managed.save(update_fields=["fields", "applied_at", "created"])
        repaired = [d for d in drifts if (d.object_kind, d.object_name) == obj.key]
        for drift in repaired:
            drift.repaired_at = at
            drift.save(update_fields=["repaired_at"])
        audit_record(
            actor=None,
            action="scheduler_drift_repair" if repaired else f"scheduler_{action.verb}",
            obj=run,
            changes={"kind": obj.kind, "name": obj.name, "fields": dict(obj.fields),
                     "before": dict(action.before)},
            reason=f"{cluster.slug}: {action}",
        )


def _bindings_store(plan: Plan, at: datetime) -> None:
    """Each planned reservation's binding, written where it is new or changed, in one
    upsert per 1,000 (not two queries per reservation: 10,000 GPUs hold about 900
    reservations, reconciled every 5 minutes); a steady reconcile reads them and writes
    none (`updated_at`: when the binding last changed)."""
    planned = {reservation_id: (binding.level, binding.why[:512], binding.scheduler_object)
               for reservation_id, binding in plan.bindings.items()}
    stored = {row[0]: row[1:] for row in ReservationBinding.objects.filter(
        reservation_id__in=planned).values_list("reservation_id", "level", "why",
                                                "scheduler_object")}
    changed = sorted(reservation_id for reservation_id, fields in planned.items()
                     if stored.get(reservation_id) != fields)
    if not changed:
        return
    ReservationBinding.objects.bulk_create([
        ReservationBinding(reservation_id=reservation_id, level=planned[reservation_id][0],
                           why=planned[reservation_id][1],
                           scheduler_object=planned[reservation_id][2], updated_at=at)
        for reservation_id in changed],
        batch_size=1000, update_conflicts=True, unique_fields=["reservation"],
        update_fields=["level", "why", "scheduler_object", "updated_at"])


@contextmanager
def _cluster_lock(cluster: Cluster, *, wait_s: float = 0):
    """One reconcile per cluster at a time (a PostgreSQL advisory lock; SQLite is one
    process), waited for up to `wait_s` seconds."""
    if connection.vendor != "postgresql":
        yield True
        return
    key = zlib.crc32(f"gpuquota.schedulers:{cluster.pk}".encode())
    deadline = time.monotonic() + wait_s
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
            locked = cursor.fetchone()[0]
        if locked or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    try:
        yield locked
    finally:
        if locked:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
