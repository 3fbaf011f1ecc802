"""What the samples say about lent and lendable GPUs: idle for lending (no busy second and
no process of the reserving team over the window, the window covered by samples), the
reserving team's process on a lent GPU, the borrowers on it, and when it was seen free of
borrowers. Read from the raw samples (the rollups lag an hour behind), owners resolved as
the rollup resolves them (`gpuquota.usage.owners`)."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, DurationField, F, Q, Sum, Value
from django.db.models.functions import Greatest, Least

from gpuquota.ingest.models import ProcessRecord, Sample
from gpuquota.lending.conf import MIN_IDLE_COVERAGE
from gpuquota.usage.conf import busy_util_percent
from gpuquota.usage.owners import OwnerResolver


@dataclass(frozen=True)
class Candidate:
    """One assigned GPU to judge over [since, now)."""

    gpu_id: int
    cluster_id: int
    team_id: int
    since: datetime


def _process_team_id(resolver: OwnerResolver, cluster_id: int, row) -> int | None:
    return resolver.team_id(
        cluster_id=cluster_id, job_source=row.job_source, job_account=row.job_account,
        user=row.user, uid=row.uid, at_s=int(row.window_start.timestamp()))


def gpus_idle(*, candidates: list[Candidate], now: datetime) -> set[int]:
    """The candidates' GPUs that were idle over their whole [since, now): samples cover at
    least MIN_IDLE_COVERAGE of it, none busy (BUSY_UTIL_PERCENT), and no process of the
    reserving team. A window of length zero or less is never idle."""
    candidates = [c for c in candidates if c.since < now]
    if not candidates:
        return set()
    start = min(c.since for c in candidates)
    covered: dict[int, float] = defaultdict(float)
    busy: set[int] = set()
    threshold = busy_util_percent()
    by_since: dict[datetime, list[int]] = defaultdict(list)
    for c in candidates:
        by_since[c.since].append(c.gpu_id)
    for since, gpu_ids in by_since.items():  # one query per window (a pass has one)
        # Summed in SQL per GPU: a pass over 10,000 GPUs no longer reads their samples.
        seconds = Least(F("window_end"), Value(now)) - Greatest(F("window_start"), Value(since))
        rows = (Sample.objects.filter(gpu_id__in=gpu_ids, window_end__gt=since,
                                      window_start__lt=now)
                .values("gpu_id").order_by()
                .annotate(covered=Sum(seconds, output_field=DurationField()),
                          busy=Count("gpu_id", filter=Q(util_gpu_avg__gte=threshold))))
        for row in rows:
            covered[row["gpu_id"]] = row["covered"].total_seconds()
            if row["busy"]:
                busy.add(row["gpu_id"])
    owner_seen = {gpu_id for gpu_id, _, _ in _team_windows(candidates, start, now, own=True)}
    return {c.gpu_id for c in candidates
            if c.gpu_id not in busy and c.gpu_id not in owner_seen
            and covered[c.gpu_id] >= MIN_IDLE_COVERAGE * (now - c.since).total_seconds()}


def _team_windows(candidates: list[Candidate], start: datetime, end: datetime, *, own: bool
                  ) -> list[tuple[int, object, int | None]]:
    """(gpu id, process row, owner team id) of the processes in [since, end) of each
    candidate whose owner is the reserving team (`own`) or anyone else, unattributed
    included (not `own`). The owners are resolved with the mappings these processes name
    only, not every account, namespace and user of the clusters (issue 34: 2,000 teams'
    at 100,000 GPUs)."""
    by_gpu = {c.gpu_id: c for c in candidates}
    rows = ProcessRecord.objects.filter(gpu_id__in=by_gpu, window_end__gt=start,
                                        window_start__lt=end)
    rows = list(rows.values_list("gpu_id", "window_start", "window_end", "job_source",
                                 "job_account", "user", "uid", named=True))
    if not rows:
        return []
    resolver = OwnerResolver(cluster_ids={c.cluster_id for c in candidates}, start=start,
                             end=end, processes=rows)
    out = []
    for row in rows:
        c = by_gpu[row.gpu_id]
        if row.window_end <= c.since:
            continue
        team_id = _process_team_id(resolver, c.cluster_id, row)
        if (team_id == c.team_id) == own:
            out.append((c.gpu_id, row, team_id))
    return out


def owner_processes_seen(*, candidates: list[Candidate], now: datetime) -> dict[int, datetime]:
    """GPU id -> the start of the first window since `since` in which a process of the
    reserving team ran on it (the owner came back to a lent GPU)."""
    candidates = [c for c in candidates if c.since < now]
    if not candidates:
        return {}
    first: dict[int, datetime] = {}
    start = min(c.since for c in candidates)
    for gpu_id, row, _ in _team_windows(candidates, start, now, own=True):
        if gpu_id not in first or row.window_start < first[gpu_id]:
            first[gpu_id] = row.window_start
    return first


def borrower_team_ids(*, candidate: Candidate, until: datetime) -> set[int | None]:
    """The owner teams (None: unattributed) of the borrowers' processes on the GPU over
    [since, until): the reserving team's own processes are not borrowers."""
    return borrower_team_ids_by_gpu(candidates=[candidate], until=until)[candidate.gpu_id]


def borrower_team_ids_by_gpu(*, candidates: list[Candidate], until: datetime
                             ) -> dict[int, set[int | None]]:
    """`borrower_team_ids` of each candidate (one per GPU), by GPU id, read at once."""
    found: dict[int, set[int | None]] = {c.gpu_id: set() for c in candidates}
    if candidates:
        start = min(c.since for c in candidates)
        for gpu_id, _, team_id in _team_windows(candidates, start, until, own=False):
            found[gpu_id].add(team_id)
    return found


def seen_free_at(*, candidate: Candidate, now: datetime) -> datetime | None:
    """When the GPU was seen free of borrowers after `since` (a returned loan's
    `returned_at`): the end of the borrowers' last window before the first sample that shows
    none of them, and `since` itself when that sample shows none from the start. None while
    no such sample has arrived."""
    since = candidate.since
    borrower_windows = sorted(
        (row.window_start, row.window_end)
        for _, row, _ in _team_windows([candidate], since, now, own=False))
    samples = Sample.objects.filter(gpu_id=candidate.gpu_id, window_end__gt=since,
                                    window_start__lt=now).order_by("window_start")
    for window_start, window_end in samples.values_list("window_start", "window_end"):
        if any(ws < window_end and we > window_start for ws, we in borrower_windows):
            continue
        ends = [we for ws, we in borrower_windows if ws < window_start]
        return max([since, *ends])
    return None
