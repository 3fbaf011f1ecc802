"""What gpuquota reads from Slurm's accounting: jobs (`sacct --json`, or slurmrestd when the
cluster has its URL, with a cursor) and, from them, each return of a lent GPU with its
time-to-return."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import ClusterIdentity
from gpuquota.core.contributions import hooks_call
from gpuquota.inventory.models import Cluster
from gpuquota.reservations.models import Loan
from gpuquota.schedulers.backend import BackendError, backend_for
from gpuquota.schedulers.models import (
    BackendConfig,
    ImportCursor,
    LoanReturn,
    SlurmJob,
    SlurmJobGpu,
)
from gpuquota.schedulers.services import problem_record
from gpuquota.schedulers.slurm.objects import hostlist_expand
from gpuquota.schedulers.slurm.options import SCAVENGER_QOS

#: Each import reads the jobs Slurm's accounting has as pending, running or ended since the
#: last import's high-water mark less this overlap (for ends slurmdbd records late): sacct
#: (and slurmrestd) select by `-S` every job still pending or running, whenever it began.
OVERLAP = timedelta(minutes=15)
FIRST_IMPORT = timedelta(days=7)
#: Jobs gpuquota holds as unfinished that the import did not see again (their end reached
#: slurmdbd later than the overlap) are re-read by id, this many at most per import.
REREAD_MAX = 500
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


def _reservation_ref(job: dict) -> tuple[str, str]:
    """A job's reservation as (id, name); 22.05 prints the name as a number (through sacct
    and slurmrestd alike), so the name is then "" and only the id says which."""
    reservation = job.get("reservation") or {}
    if not isinstance(reservation, dict):
        return "", ""
    name = reservation.get("name")
    name = name if isinstance(name, str) and not name.isdigit() else ""
    return str(reservation.get("id") or ""), name


def job_fields(job: dict, reservations: dict[str, str] | None = None) -> dict:
    """One `sacct --json` (or slurmrestd accounting) job -> SlurmJob's fields, its
    reservation named from `reservations` (id -> name) when the job names it by id only;
    ValueError when it is not a job."""
    try:
        state = job["state"]["current"]
        state = state[0] if isinstance(state, list) else state
        times = job["time"]
        submitted = _instant(times["submission"])
    except (KeyError, TypeError, IndexError) as exc:
        raise ValueError(f"not a sacct job: {exc}") from exc
    gpu_tres, gpus = _gpu_tres(job)
    reservation_id, reservation = _reservation_ref(job)
    return {
        "job_id": str(job["job_id"]), "submitted_at": submitted,
        "started_at": _instant(times.get("start")), "ended_at": _instant(times.get("end")),
        "state": str(state)[:32], "account": job.get("account") or "",
        "user": job.get("user") or "", "partition": job.get("partition") or "",
        "qos": job.get("qos") or "", "nodes": _nodes(job.get("nodes")),
        "reservation": reservation or (reservations or {}).get(reservation_id, ""),
        "gpu_tres": gpu_tres, "gpus": gpus, "time_limit_s": _limit_s(times.get("limit")),
    }


def _limit_s(value) -> int | None:
    """A job's time limit in seconds from its minutes (`{"set", "infinite", "number"}` in
    later API versions); None when unlimited or not set."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) and not value.get(
            "infinite") else None
    try:
        minutes = int(value or 0)
    except (TypeError, ValueError):
        return None
    return minutes * 60 if 0 < minutes < 2**31 // 60 else None


def _nodes(value) -> str:
    """A job's nodes; empty for a job that never started (sacct: `None assigned`)."""
    value = str(value or "")
    return "" if value.lower().startswith("none") else value[:1024]


def _accounting_jobs(backend, config: BackendConfig, since: datetime,
                     job_ids: list[str] | None = None) -> tuple[list, str]:
    """The jobs Slurm's accounting has since `since` (or, given `job_ids`, those jobs,
    whenever they ran), and where they were read."""
    if backend.rest is not None:
        if job_ids is not None:
            return [j for job_id in job_ids for j in backend.rest.accounting_job(job_id)], \
                "slurmrestd"
        return backend.rest.accounting_jobs(since), "slurmrestd"
    which = ["-j", ",".join(job_ids)] if job_ids is not None else [
        "-S", since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S"), "-E", "now"]
    out = backend.runner.run(["sacct", "--json", "-a", "-X", "-D", *which],
                             timeout_s=max(config.command_timeout_s, 60)).stdout
    try:
        jobs = json.loads(out)["jobs"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BackendError(f"sacct --json answered something unusable: {exc}",
                           detail=out[:2000]) from exc
    return jobs, "sacct --json"


def _reservation_names(backend, jobs: list) -> dict[str, str]:
    """Reservation id -> name (`sacctmgr show reservation`: slurmrestd 22.05 has no
    reservation accounting), asked only when a job names its reservation by id only."""
    refs = [_reservation_ref(job) for job in jobs if isinstance(job, dict)]
    if not any(rid and not name for rid, name in refs):
        return {}
    return dict(line.split("|", 1) for line in backend.runner.run(
        ["sacctmgr", "-P", "-n", "show", "reservation", "format=id,name"]
    ).stdout.splitlines() if "|" in line)


def slurm_jobs_import(*, cluster: Cluster, now: datetime | None = None) -> int:
    """Import the cluster's jobs pending, running or ended since the cursor (less an
    overlap), and those gpuquota holds as unfinished that this did not see again (read by
    id), attributed to teams by their Slurm accounts, in one upsert that writes only the
    runs new or changed; returns how many it wrote. Read through slurmrestd when the
    cluster has its URL, else `sacct --json`. BackendError when that fails or answers
    something unusable (the cursor then stays)."""
    now = now or timezone.now()
    config = BackendConfig.objects.get(cluster=cluster)
    backend = backend_for(cluster, config)
    cursor = ImportCursor.objects.filter(cluster=cluster).first()
    since = (cursor.imported_until - OVERLAP) if cursor else now - FIRST_IMPORT
    jobs, source = _accounting_jobs(backend, config, since)
    rows = _rows(backend, jobs, source)
    seen = {row["job_id"] for row in rows}
    stale = sorted({job_id for job_id in SlurmJob.objects.filter(
        cluster=cluster, ended_at__isnull=True, submitted_at__gte=now - FIRST_IMPORT,
    ).values_list("job_id", flat=True) if job_id.isdigit()} - seen)[:REREAD_MAX]
    if stale:
        rows += _rows(backend, _accounting_jobs(backend, config, since, stale)[0], source)
    with transaction.atomic():
        written = _rows_record(cluster, rows)
        ImportCursor.objects.update_or_create(cluster=cluster, defaults={"imported_until": now})
    return written


def slurm_jobs_record(*, cluster: Cluster, jobs: list[dict]) -> int:
    """Record jobs as Slurm's accounting answered them (`sacct --json`'s `jobs`), as an
    import does without reading them: attributed to teams by their Slurm accounts, in one
    upsert; returns how many runs it wrote. ValueError for something that is not a job."""
    return _rows_record(cluster, [job_fields(job) for job in jobs])


def _rows_record(cluster: Cluster, rows: list[dict]) -> int:
    teams = _account_teams(cluster)
    for row in rows:
        row["team_id"] = teams.get(row["account"])
    return _upsert(cluster, rows)


def _rows(backend, jobs: list, source: str) -> list[dict]:
    try:
        reservations = _reservation_names(backend, jobs)
        return [job_fields(job, reservations) for job in jobs]
    except (ValueError, KeyError, TypeError) as exc:
        raise BackendError(f"{source} answered a job gpuquota cannot read: {exc}",
                           detail=str(jobs)[:2000]) from exc


#: SlurmJob's columns an import writes (besides cluster_id), with their PostgreSQL types.
_COLUMNS = {"job_id": "text", "submitted_at": "timestamptz", "started_at": "timestamptz",
            "ended_at": "timestamptz", "state": "text", "account": "text", "user": "text",
            "partition": "text", "qos": "text", "reservation": "text", "nodes": "text",
            "gpu_tres": "text", "gpus": "integer", "team_id": "bigint",
            "time_limit_s": "integer"}
_KEY = ("job_id", "submitted_at")


def _upsert(cluster: Cluster, rows: list[dict]) -> int:
    """Insert the runs, or update those whose fields changed, in one statement (a run read
    twice: the last reading; none: the statement still runs, so that an import's queries do
    not depend on its jobs); how many rows it wrote."""
    by_key = {(row["job_id"], row["submitted_at"]): row for row in rows}
    table = connection.ops.quote_name(SlurmJob._meta.db_table)
    names = [connection.ops.quote_name(SlurmJob._meta.get_field(
        "team" if c == "team_id" else c).column) for c in _COLUMNS]
    changing = [n for c, n in zip(_COLUMNS, names, strict=True) if c not in _KEY]
    sql = (
        f"INSERT INTO {table} (cluster_id, {', '.join(names)}) "
        f"SELECT %s, * FROM unnest({', '.join(f'%s::{t}[]' for t in _COLUMNS.values())}) "
        f"ON CONFLICT (cluster_id, job_id, submitted_at) DO UPDATE SET "
        + ", ".join(f"{n} = EXCLUDED.{n}" for n in changing)
        + f" WHERE ({', '.join(f'{table}.{n}' for n in changing)}) IS DISTINCT FROM "
        f"({', '.join(f'EXCLUDED.{n}' for n in changing)})")
    params = [cluster.pk] + [[row[c] for row in by_key.values()] for c in _COLUMNS]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def _account_teams(cluster: Cluster) -> dict[str, int]:
    now = timezone.now()
    return dict(ClusterIdentity.objects.filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=now),
        cluster=cluster, kind=ClusterIdentity.Kind.SLURM_ACCOUNT, valid_from__lte=now,
    ).values_list("key", "team_id"))


def _held(job: SlurmJob, gpu_id: int, node: str, seen: dict[str, set[int]],
          hosts: dict[str, set[str]]) -> bool:
    """Whether `job` had the GPU: by the GPUs slurmctld was seen saying it held (SlurmJobGpu),
    else (never seen running) by its node list (expanded once into `hosts`)."""
    gpus = seen.get(job.job_id)
    if gpus:
        return gpu_id in gpus
    if job.nodes not in hosts:
        hosts[job.nodes] = set(hostlist_expand(job.nodes))
    return node in hosts[job.nodes]


@transaction.atomic
def loan_returns_record(*, cluster: Cluster) -> list[LoanReturn]:
    """For each loan on the cluster, each owner's job that started on the lent GPU right
    after a scavenger job there was preempted: a LoanReturn with its time-to-return (owner
    submitted -> owner started). "There" is the lent GPU where slurmctld said which GPUs the
    jobs held, the GPU's node otherwise. An open loan is ended by it (`LOAN_OWNER_JOB`: the
    owner's job ran shorter than the running jobs' observation); a returned loan's
    `freed_at` is set from it. The candidate jobs of all the loans are read at once."""
    open_loans = Loan.objects.filter(gpu__node__cluster=cluster).filter(
        Q(returned_at__isnull=True) | Q(freed_at__isnull=True))
    loans = list(open_loans.select_related("gpu__node", "assignment__reservation"))
    config = BackendConfig.objects.get(cluster=cluster)
    options = backend_for(cluster, config).options
    earliest = min((loan.lent_from for loan in loans), default=timezone.now())
    owners_all = SlurmJob.objects.filter(
        cluster=cluster, started_at__gte=earliest,
        team_id__in=open_loans.values("assignment__reservation__team_id"),
    ).exclude(qos=SCAVENGER_QOS)
    preempted_all = SlurmJob.objects.filter(
        cluster=cluster, qos=SCAVENGER_QOS, state__in=PREEMPTED_STATES, ended_at__gte=earliest)
    seen: dict[str, set[int]] = {}
    for job_id, gpu_id in SlurmJobGpu.objects.filter(cluster=cluster, gpu__isnull=False).filter(
            Q(job_id__in=owners_all.values("job_id"))
            | Q(job_id__in=preempted_all.values("job_id"))).values_list("job_id", "gpu_id"):
        seen.setdefault(job_id, set()).add(gpu_id)
    all_owners, all_preempted = list(owners_all), list(preempted_all)
    found, hosts, lent_froms = [], {}, defaultdict(list)
    for loan in loans:
        lent_froms[loan.gpu_id].append(loan.lent_from)
    for loan in loans:
        node = options.node_name(loan.gpu.node.hostname)
        team_id = loan.assignment.reservation.team_id
        # an owner's job belongs to the GPU's loan in force when it was submitted, not to
        # an earlier loan of the GPU whose end was never seen free
        next_lent = min((lent for lent in lent_froms[loan.gpu_id] if lent > loan.lent_from),
                        default=None)
        owners = [o for o in all_owners
                  if o.team_id == team_id and o.started_at >= loan.lent_from
                  and (next_lent is None or o.submitted_at < next_lent)]
        preempted = [j for j in all_preempted if j.ended_at >= loan.lent_from
                     and _held(j, loan.gpu_id, node, seen, hosts)]
        for owner in (o for o in owners if _held(o, loan.gpu_id, node, seen, hosts)):
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
            if loan.returned_at is None:  # the owner took it back, in a job too short to be
                # seen running: the loan ends as the running jobs' observation ends it
                hooks_call("LOAN_OWNER_JOB", loan=loan, job_id=owner.job_id,
                           asked_at=owner.submitted_at, freed_at=owner.started_at)
                loan.refresh_from_db()
            elif loan.returned_at and not loan.freed_at and owner.started_at >= loan.returned_at:
                loan.freed_at = owner.started_at
                loan.save(update_fields=["freed_at"])
    return found


def slurm_clusters_each(step, *, what: str) -> dict:
    """`step(cluster)` (a dict of what it did) for every Slurm cluster with a backend
    switched on; a BackendError becomes the cluster's problem (`what: ...`), never an
    exception. The results by cluster slug."""
    done = {}
    for config in BackendConfig.objects.exclude(mode=BackendConfig.Mode.OFF).filter(
        cluster__scheduler=Cluster.Scheduler.SLURM
    ).select_related("cluster"):
        try:
            done[config.cluster.slug] = step(config.cluster)
        except BackendError as exc:
            problem_record(cluster=config.cluster, summary=f"{what}: {exc.message}",
                           detail=exc.detail)
            done[config.cluster.slug] = {"error": exc.message}
    return done


def _accounting_import(cluster: Cluster) -> dict:
    imported = slurm_jobs_import(cluster=cluster)
    return {"jobs": imported, "returns": len(loan_returns_record(cluster=cluster))}


def slurm_clusters_accounting_import() -> dict:
    """Import jobs and record loan returns for every Slurm cluster with a backend switched
    on; a failure becomes the cluster's problem, never an exception."""
    return slurm_clusters_each(_accounting_import, what="job import")
