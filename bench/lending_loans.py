"""LOCAL ADAPTER, standing in for the lending services (issue 19) until branch `lending`
has them: lend, return and idle detection written here against the product's `Loan` model
(gpuquota/reservations/models.py) and the product's stored telemetry. The database's own
constraints on loans (never lent twice at once, only inside its assignment) still hold every
write. When `gpuquota.lending` lands, these three functions call its services instead.

Idle, as the issue defines it: no busy second (a sample at or over `BUSY_UTIL_PERCENT`) and
no process on the GPU, read from the stored samples and process records since the later of
the assignment's start and the GPU's last return, for `lend_after_idle_s`; a GPU with no
sample in the last `fresh_s` (its node silent) or a failed interval in force is not idle.
"""

from datetime import datetime, timedelta

from django.db import connection

_IDLE_SQL = """
WITH busy AS (
    SELECT gpu_id, max(window_end) AS last_active FROM ingest_sample
     WHERE gpu_id = ANY(%(gpus)s) AND window_end > %(since)s AND window_start < %(now)s
       AND util_gpu_avg >= %(busy)s GROUP BY gpu_id
    UNION ALL
    SELECT gpu_id, max(window_end) FROM ingest_processrecord
     WHERE gpu_id = ANY(%(gpus)s) AND window_end > %(since)s AND window_start < %(now)s
     GROUP BY gpu_id
), seen AS (
    SELECT gpu_id, max(window_end) AS last_seen FROM ingest_sample
     WHERE gpu_id = ANY(%(gpus)s) AND window_end > %(fresh)s AND window_start < %(now)s
     GROUP BY gpu_id
)
SELECT seen.gpu_id, seen.last_seen, (SELECT max(last_active) FROM busy
                                      WHERE busy.gpu_id = seen.gpu_id)
  FROM seen
"""


def gpus_idle(*, candidates: dict[int, datetime], now: datetime, lend_after_idle_s: int,
              fresh_s: int) -> list[int]:
    """The candidate GPUs (id -> the later of assignment start and last return) idle for
    `lend_after_idle_s` at `now`, and not failed."""
    from gpuquota.inventory.models import GpuHealthInterval
    from gpuquota.usage.conf import busy_util_percent

    if not candidates:
        return []
    since = now - timedelta(seconds=lend_after_idle_s)
    failed = set(GpuHealthInterval.objects.filter(
        gpu_id__in=list(candidates), state="failed", valid_from__lte=now)
        .exclude(valid_until__lte=now).values_list("gpu_id", flat=True))
    with connection.cursor() as cursor:
        cursor.execute(_IDLE_SQL, {"gpus": list(candidates), "since": since, "now": now,
                                   "busy": float(busy_util_percent()),
                                   "fresh": now - timedelta(seconds=fresh_s)})
        rows = cursor.fetchall()
    idle = []
    for gpu_id, _last_seen, last_active in rows:
        if gpu_id in failed or candidates[gpu_id] > since:
            continue
        if last_active is None or last_active <= since:
            idle.append(gpu_id)
    return sorted(idle)


def loan_lend(*, assignment_id: int, gpu_id: int, at: datetime) -> int:
    """An open loan of the assigned GPU from `at`; returns its id."""
    from gpuquota.reservations.models import Loan

    return Loan.objects.create(assignment_id=assignment_id, gpu_id=gpu_id, lent_from=at,
                               lend_reason="idle (simulation)").id


def loan_return(*, loan_id: int, returned_at: datetime, freed_at: datetime | None,
                reason: str) -> None:
    """The loan ends at `returned_at` (the ask); `freed_at` when the borrowers left."""
    from gpuquota.reservations.models import Loan

    Loan.objects.filter(id=loan_id, returned_at__isnull=True).update(
        returned_at=returned_at, freed_at=freed_at, end_reason=reason)
