"""Writes of the schedulers app: backend configuration (audited, credential encrypted),
cluster problems, and the request to reconcile after a reservation, quota or loan change."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from gpuquota.core.dispatch import task_enqueue_on_commit_coalesced
from gpuquota.core.errors import DomainError
from gpuquota.core.services import audit_record
from gpuquota.schedulers.backend import SchedulerObject, backend_options_check
from gpuquota.schedulers.conf import reconcile_coalesce_s
from gpuquota.schedulers.models import BackendConfig, ManagedObject, Problem
from gpuquota.schedulers.runner import OUTAGE
from gpuquota.schedulers.secrets import secret_encrypt

CONFIG_FIELDS = ("mode", "commands_dir", "api_url", "command_timeout_s", "options")


def schedulers_reconcile_request(*, reason: str) -> None:
    """Ask every cluster's scheduler backend to reconcile once the current transaction
    commits (a reservation, quota or loan changed). Idempotent: reconciling twice changes
    nothing the second time. Nothing is queued while no cluster has a backend switched on.
    With a broker, the requests of SCHEDULER_RECONCILE_COALESCE_S share one run that starts
    at the end of that window (a lending pass that lends 1,000 GPUs queues one reconcile of
    every cluster, not 1,000)."""
    if BackendConfig.objects.exclude(mode=BackendConfig.Mode.OFF).exists():
        task_enqueue_on_commit_coalesced("schedulers.reconcile_all",
                                         window_s=reconcile_coalesce_s(), reason=reason)


@transaction.atomic
def backend_config_update(
    *, cluster, actor, token: str | None = None, **values
) -> BackendConfig:
    """Create or change a cluster's backend configuration, audited field by field; the
    token (None: unchanged, "": removed) is stored encrypted and audited as changed only."""
    unknown = set(values) - set(CONFIG_FIELDS)
    if unknown:
        raise DomainError(f"Unknown setting {sorted(unknown)[0]!r}.", field=sorted(unknown)[0])
    if "command_timeout_s" in values and not 1 <= int(values["command_timeout_s"]) <= 600:
        raise DomainError("Between 1 and 600 seconds.", field="command_timeout_s")
    if "options" in values and not isinstance(values["options"], dict):
        raise DomainError("A JSON object.", field="options")
    if "options" in values:
        backend_options_check(cluster, values["options"])  # refuses unknown or malformed
    config, created = BackendConfig.objects.select_for_update().get_or_create(cluster=cluster)
    changes = {}
    for name, value in values.items():
        if getattr(config, name) != value:
            changes[name] = [getattr(config, name), value]
            setattr(config, name, value)
    if token is not None:
        changes["token"] = ["(hidden)", "(removed)" if token == "" else "(changed)"]
        config.token_encrypted = secret_encrypt(token)
    if changes or created:
        config.full_clean(exclude=["cluster"])
        config.save()
        audit_record(actor=actor, action="scheduler_config_update", obj=config,
                     changes=changes, reason="created" if created else "")
        schedulers_reconcile_request(reason="backend configuration changed")
    return config


def problem_record(*, cluster, summary: str, detail: str = "") -> Problem:
    """Open a problem for the cluster, or count one more occurrence of the open one. An
    outage (the scheduler's daemons not answering) is one problem whichever command or
    task found it: its summary is the outage's, the rest goes in the detail."""
    now = timezone.now()
    if OUTAGE in summary and summary != OUTAGE:
        summary, detail = OUTAGE, f"{summary}\n{detail}"
    problem = Problem.objects.filter(
        cluster=cluster, summary=summary[:255], status=Problem.Status.OPEN
    ).first()
    if problem is None:
        return Problem.objects.create(
            cluster=cluster, summary=summary[:255], detail=detail,
            first_seen_at=now, last_seen_at=now,
        )
    problem.last_seen_at, problem.detail = now, detail
    problem.occurrences += 1
    problem.save(update_fields=["last_seen_at", "detail", "occurrences"])
    return problem


def problems_resolve(*, cluster, keep: Iterable[str] = ()) -> int:
    """Resolve every open problem of the cluster but those summarised in `keep` (a reconcile
    run just succeeded, or applied all but the refused objects `keep` names)."""
    return Problem.objects.filter(cluster=cluster, status=Problem.Status.OPEN).exclude(
        summary__in=[k[:255] for k in keep]).update(
        status=Problem.Status.RESOLVED, resolved_at=timezone.now()
    )


def managed_object_written(*, cluster, obj: SchedulerObject, at, removed: bool = False) -> None:
    """Record an object a service wrote on the cluster outside a reconcile run (a GPU's
    drain) as applied, so the reconcile loop measures drift against it; `removed`: it was
    deleted, so forget it."""
    if removed:
        ManagedObject.objects.filter(cluster=cluster, kind=obj.kind, name=obj.name).delete()
        return
    ManagedObject.objects.update_or_create(
        cluster=cluster, kind=obj.kind, name=obj.name,
        defaults={"fields": dict(obj.fields), "applied_at": at, "created": True})
