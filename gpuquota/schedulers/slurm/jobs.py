"""What gpuquota reads from Slurm's accounting: jobs (`sacct --json`, with a cursor) and,
from them, each return of a lent GPU with its time-to-return."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import ClusterIdentity
from gpuquota.inventory.models import Cluster
from gpuquota.reservations.models import Loan
from gpuquota.schedulers.backend import BackendError, backend_for
from gpuquota.schedulers.models import BackendConfig, ImportCursor, LoanReturn, SlurmJob
from gpuquota.schedulers.slurm.objects import hostlist_expand
from gpuquota.schedulers.slurm.options import SCAVENGER_QOS

#: Each import looks this far behind its cursor: jobs still running or pending at the
#: last import are seen again with their new state.
OVERLAP = timedelta(hours=24)
FIRST_IMPORT = timedelta(days=7)
PREEMPTED_STATES = ("PREEMPTED", "REQUEUED")


def _instant(value) -> datetime | None:
    if isinstance(value, dict):  # later API versions wrap numbers: {"set": .., "number": ..}
        value = value.get("number") if value.get("set", True) else None
    return datetime.fromtimestamp(int(value), tz=UTC) if value else None


def _gpu_tres(job: dict) -> tuple[str, int]:
    """The typed GPU TRES a job was allocated (`gres/gpu:h100=2`) and its GPU count."""
    typed, total = [], 0
    for tres in (job.get("tres") or {}).get("allocated") or []:
        if tres.get("type") != "gres" or not str(tres.get("name", "")).startswith("gpu"):
            continue
        name, count = str(tres["name"]), int(tres.get("count") or 0)
        if ":" in name:
            typed.append(f"gres/{name}={count}")
        else:
            total = count
    return ",".join(sorted(typed)), total


def job_fields(job: dict, reservations: dict[str, str] | None = None) -> dict:
    """One `sacct --json` job -> SlurmJob's fields; ValueError when it is not a job."""
    try:
        state = job["state"]["current"]
        state = state[0] if isinstance(state, list) else state
        times = job["time"]
        submitted = _instant(times["submission"])
    except (KeyError, TypeError, IndexError) as exc:
        raise ValueError(f"not a sacct job: {exc}") from exc
    gpu_tres, gpus = _gpu_tres(job)
    # 22.05's `reservation.name` is garbage (a number): the id is mapped to a name by
    # `sacctmgr show reservation` (`reservations`).
    reservation = job.get("reservation") or {}
    reservation_id = reservation.get("id") if isinstance(reservation, dict) else None
    return {
        "job_id": str(job["job_id"]), "submitted_at": submitted,
        "started_at": _instant(times.get("start")), "ended_at": _instant(times.get("end")),
        "state": str(state)[:32], "account": job.get("account") or "",
        "user": job.get("user") or "", "partition": job.get("partition") or "",
        "qos": job.get("qos") or "", "nodes": (job.get("nodes") or "")[:1024],
        "reservation": (reservations or {}).get(str(reservation_id), ""),
        "gpu_tres": gpu_tres, "gpus": gpus,
    }


def slurm_jobs_import(*, cluster: Cluster, now: datetime | None = None) -> int:
    """Import the cluster's jobs since the cursor (minus an overlap), attributed to teams
    by their Slurm accounts; returns how many runs were written. BackendError when sacct
    fails or answers malformed JSON (the cursor then stays)."""
    now = now or timezone.now()
    config = BackendConfig.objects.get(cluster=cluster)
    backend = backend_for(cluster, config)
    cursor = ImportCursor.objects.filter(cluster=cluster).first()
    since = (cursor.imported_until - OVERLAP) if cursor else now - FIRST_IMPORT
    out = backend.runner.run(["sacct", "--json", "-a", "-X", "-D",
                              "-S", since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S"),
                              "-E", "now"], timeout_s=max(config.command_timeout_s, 60)).stdout
    reservations = dict(
        line.split("|", 1) for line in backend.runner.run(
            ["sacctmgr", "-P", "-n", "show", "reservation", "format=id,name"]
        ).stdout.splitlines() if "|" in line
    )
    try:
        jobs = json.loads(out)["jobs"]
        rows = [job_fields(job, reservations) for job in jobs]
    except (ValueError, KeyError, TypeError) as exc:
        raise BackendError(f"sacct --json answered something unusable: {exc}",
                           detail=out[:2000]) from exc
    teams = _account_teams(cluster)
    with transaction.atomic():
        for row in rows:
            row["team_id"] = teams.get(row["account"])
            SlurmJob.objects.update_or_create(
                cluster=cluster, job_id=row.pop("job_id"), submitted_at=row.pop("submitted_at"),
                defaults=row,
            )
        ImportCursor.objects.update_or_create(cluster=cluster, defaults={"imported_until": now})
    return len(rows)


def _account_teams(cluster: Cluster) -> dict[str, int]:
    now = timezone.now()
    return dict(ClusterIdentity.objects.filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=now),
        cluster=cluster, kind=ClusterIdentity.Kind.SLURM_ACCOUNT, valid_from__lte=now,
    ).values_list("key", "team_id"))


def _on(job: SlurmJob, node: str) -> bool:
    return node in hostlist_expand(job.nodes)


@transaction.atomic
def loan_returns_record(*, cluster: Cluster) -> list[LoanReturn]:
    """For each loan on the cluster, each owner's job that started on the lent GPU's node
    right after a scavenger job there was preempted: a LoanReturn with its time-to-return
    (owner submitted -> owner started). A returned loan's `freed_at` is set from it."""
    config = BackendConfig.objects.get(cluster=cluster)
    options = backend_for(cluster, config).options
    found = []
    loans = Loan.objects.filter(gpu__node__cluster=cluster).select_related(
        "gpu__node", "assignment__reservation")
    for loan in loans.filter(Q(returned_at__isnull=True) | Q(freed_at__isnull=True)):
        node = options.node_name(loan.gpu.node.hostname)
        team_id = loan.assignment.reservation.team_id
        owners = SlurmJob.objects.filter(
            cluster=cluster, team_id=team_id, started_at__gte=loan.lent_from,
        ).exclude(qos=SCAVENGER_QOS)
        preempted = [j for j in SlurmJob.objects.filter(
            cluster=cluster, qos=SCAVENGER_QOS, state__in=PREEMPTED_STATES,
            ended_at__gte=loan.lent_from) if _on(j, node)]
        for owner in (o for o in owners if _on(o, node)):
            borrower = max((b for b in preempted
                            if owner.submitted_at <= b.ended_at <= owner.started_at),
                           key=lambda b: b.ended_at, default=None)
            if borrower is None:
                continue
            record, _ = LoanReturn.objects.get_or_create(
                loan=loan, owner_job_id=owner.job_id, defaults={
                    "borrower_job_id": borrower.job_id,
                    "owner_submitted_at": owner.submitted_at,
                    "borrower_preempted_at": borrower.ended_at,
                    "owner_started_at": owner.started_at,
                    "time_to_return_s": int(
                        (owner.started_at - owner.submitted_at).total_seconds()),
                })
            found.append(record)
            if loan.returned_at and not loan.freed_at and owner.started_at >= loan.returned_at:
                loan.freed_at = owner.started_at
                loan.save(update_fields=["freed_at"])
    return found
