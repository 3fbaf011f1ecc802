"""The rollup rule, as pure computation over loaded inputs (accounting.md, Usage samples).

`usage_inputs_load` reads everything a set of physical GPUs needs over a window in
a fixed number of queries; `usage_buckets` turns it into per-bucket sums for one
GPU and any whole-second window (an hour for the stored rollups, a partial hour
at a period's edge for the selectors). Times are handled as epoch seconds and
utilizations as integer hundredths (the samples' exact two decimals), so the bulk rows
load as plain integers and the arithmetic makes no per-window objects; a dense hour's
rollup costs about as much as reading its rows.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise
from typing import NamedTuple

from django.db.models import BigIntegerField, Func, IntegerField, Q

from gpuquota.ingest.models import ProcessRecord, Sample
from gpuquota.inventory.models import Gpu, GpuClassInterval, GpuHealthInterval, GpuNodeInterval
from gpuquota.reservations.models import Assignment
from gpuquota.usage.conf import MAX_WINDOW_S, busy_util_percent
from gpuquota.usage.owners import OwnerResolver
from reports.models import RateCard

RESERVED, UNRESERVED = "reserved", "unreserved"


def _s(value: datetime) -> int:
    return int(value.timestamp())


def _dt(value: int) -> datetime:
    return datetime.fromtimestamp(value, tz=UTC)


class _IntegerSql(Func):
    """An expression both databases already return as a Python int: no converter."""

    @property
    def convert_value(self):
        return self._convert_value_noop


class EpochSeconds(_IntegerSql):
    """A datetime column as integer epoch seconds (all stored instants are whole)."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)::bigint"
    output_field = BigIntegerField()

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection,
                           template="CAST(strftime('%%%%s', %(expressions)s) AS INTEGER)", **extra)


class Hundredths(_IntegerSql):
    """A numeric(…, 2) column as an exact integer count of hundredths."""

    template = "(%(expressions)s * 100)::integer"
    output_field = IntegerField()

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection,
                           template="CAST(round(%(expressions)s * 100) AS INTEGER)", **extra)


class Piece(NamedTuple):
    """The stretch [start, end) a sample covers on one device (util in hundredths)."""

    device_id: int
    start: int
    end: int
    util_c: int
    busy: bool
    energy_per_s: float | None
    memory_max: int | None


class Proc(NamedTuple):
    device_id: int
    start: int
    end: int
    pid: int
    pid_start: int
    uid: int | None
    user: str | None
    job_source: str | None
    job_account: str | None


@dataclass(frozen=True)
class Span:
    """An interval with a payload: an assignment, a class, a failure, a node."""

    start: int
    end: int | None
    value: object

    def covers(self, at: int) -> bool:
        return self.start <= at and (self.end is None or at < self.end)


@dataclass
class Bucket:
    covered_s: int = 0
    busy_s: int = 0
    util_weighted: Decimal = Decimal(0)
    energy_j: float = 0.0
    memory_used_bytes_max: int | None = None
    processes: set = field(default_factory=set)
    users: set = field(default_factory=set)


@dataclass(frozen=True)
class BucketKey:
    kind: str
    gpu_class_id: int
    assignment_id: int | None
    reservation_id: int | None
    team_id: int | None
    split_ways: int
    failed: bool
    rate_card_id: int | None = None


@dataclass
class UsageInputs:
    start: int
    end: int
    devices: dict[int, list[int]]  # physical gpu id → its own id and its MIG devices' ids
    current_class: dict[int, int]
    current_cluster: dict[int, int]
    pieces: dict[int, list[Piece]]
    procs: dict[int, list[Proc]]
    assignments: dict[int, list[Span]]
    classes: dict[int, list[Span]]
    failures: dict[int, list[Span]]
    clusters: dict[int, list[Span]]
    resolver: OwnerResolver
    rate_cards: dict[int, list[Span]] = field(default_factory=dict)  # by gpu class id


def sample_pieces(samples: list[tuple], busy_from: Decimal) -> list[Piece]:
    """One device's samples (gpu_id, start_s, end_s, readings, util_c, energy_j,
    memory_max), ordered by start → what each covers: up to the next sample's start;
    readings = 0 or a null util cover nothing; busy when util >= busy_from, exactly."""
    busy_from_c = busy_from * 100
    pieces = []
    last = len(samples) - 1
    for i, (device_id, start, window_end, readings, util_c, energy, memory) in enumerate(samples):
        end = window_end if i == last else min(window_end, samples[i + 1][1])
        if not readings or util_c is None or end <= start:
            continue
        length = window_end - start
        pieces.append(Piece(
            device_id, start, end, util_c, util_c >= busy_from_c,
            None if energy is None or length <= 0 else energy / length, memory,
        ))
    return pieces


def coverage_pieces(samples: list[dict], busy_from: Decimal) -> list[Piece]:
    """`sample_pieces` for samples read as model field dicts (ordered by window_start)."""
    return sample_pieces([
        (row["gpu_id"], _s(row["window_start"]), _s(row["window_end"]), row["readings"],
         None if row["util_gpu_avg"] is None else int(row["util_gpu_avg"] * 100),
         row["energy_j"], row["memory_used_bytes_max"]) for row in samples], busy_from)


def _overlapping(start_field: str, end_field: str, start: datetime, end: datetime) -> Q:
    return Q(**{f"{start_field}__lt": end}) & (
        Q(**{f"{end_field}__isnull": True}) | Q(**{f"{end_field}__gt": start})
    )


def usage_inputs_load(*, gpu_ids: list[int] | None, start: datetime,
                      end: datetime) -> UsageInputs:
    """Everything the rollup of these physical GPUs (None: all) over [start, end)
    reads, in a fixed number of queries whatever the fleet size."""
    devices: dict[int, list[int]] = defaultdict(list)
    current_class, current_cluster, device_parent = {}, {}, {}
    gpus = Gpu.objects.all()
    if gpu_ids is not None:
        gpus = gpus.filter(Q(id__in=gpu_ids) | Q(parent_id__in=gpu_ids))
    for row in gpus.values("id", "parent_id", "gpu_class_id", "node__cluster_id"):
        physical = row["parent_id"] or row["id"]
        devices[physical].append(row["id"])
        device_parent[row["id"]] = physical
        if row["parent_id"] is None:
            current_class[row["id"]] = row["gpu_class_id"]
            current_cluster[row["id"]] = row["node__cluster_id"]
    device_ids = list(device_parent)
    gpu_ids = list(devices)

    busy_from = busy_util_percent()
    by_device: dict[int, list[tuple]] = defaultdict(list)
    samples = Sample.objects.filter(
        gpu_id__in=device_ids,
        window_start__gte=start - timedelta(seconds=MAX_WINDOW_S),
        window_start__lt=end,
    ).order_by("gpu_id", "window_start")
    for row in samples.values_list(
            "gpu_id", EpochSeconds("window_start"), EpochSeconds("window_end"), "readings",
            Hundredths("util_gpu_avg"), "energy_j", "memory_used_bytes_max"):
        by_device[row[0]].append(row)
    pieces = {device: sample_pieces(rows, busy_from) for device, rows in by_device.items()}

    procs: dict[int, list[Proc]] = defaultdict(list)
    records = ProcessRecord.objects.filter(
        gpu_id__in=device_ids, window_start__lt=end, window_end__gt=start
    )
    for row in records.values_list(
            "gpu_id", EpochSeconds("window_start"), EpochSeconds("window_end"), "pid",
            "pid_start", "uid", "user", "job_source", "job_account"):
        procs[row[0]].append(Proc._make(row))

    assignments: dict[int, list[Span]] = defaultdict(list)
    rows = Assignment.objects.filter(
        _overlapping("assigned_from", "assigned_until", start, end), gpu_id__in=gpu_ids
    ).values("id", "gpu_id", "assigned_from", "assigned_until", "reservation_id",
             "reservation__team_id", "reservation__start", "reservation__approved_at")
    for row in rows:
        # Reserved time starts at the reservation's charged start: max(start, approved_at).
        charged_from = max(row["assigned_from"], row["reservation__start"],
                           row["reservation__approved_at"] or row["reservation__start"])
        if charged_from < row["assigned_until"]:
            assignments[row["gpu_id"]].append(Span(
                _s(charged_from), _s(row["assigned_until"]),
                (row["id"], row["reservation_id"], row["reservation__team_id"]),
            ))

    def spans(queryset, value_field: str) -> dict[int, list[Span]]:
        result: dict[int, list[Span]] = defaultdict(list)
        for row in queryset.values("gpu_id", "valid_from", "valid_until", value_field):
            until = row["valid_until"]
            result[row["gpu_id"]].append(
                Span(_s(row["valid_from"]), None if until is None else _s(until), row[value_field])
            )
        return result

    window = _overlapping("valid_from", "valid_until", start, end)
    classes = spans(GpuClassInterval.objects.filter(window, gpu_id__in=gpu_ids), "gpu_class_id")
    failures = spans(
        GpuHealthInterval.objects.filter(
            window, gpu_id__in=gpu_ids, state=GpuHealthInterval.State.FAILED
        ),
        "state",
    )
    clusters = spans(
        GpuNodeInterval.objects.filter(window, gpu_id__in=gpu_ids), "node__cluster_id"
    )
    class_ids = set(current_class.values()) | {
        span.value for values in classes.values() for span in values
    }
    rate_cards: dict[int, list[Span]] = defaultdict(list)
    cards = RateCard.objects.filter(window, gpu_class_id__in=class_ids)
    for row in cards.values("id", "gpu_class_id", "valid_from", "valid_until"):
        until = row["valid_until"]
        rate_cards[row["gpu_class_id"]].append(
            Span(_s(row["valid_from"]), None if until is None else _s(until), row["id"]))
    cluster_ids = set(current_cluster.values()) | {
        span.value for values in clusters.values() for span in values
    }
    return UsageInputs(
        start=_s(start), end=_s(end), devices=devices, current_class=current_class,
        current_cluster=current_cluster, pieces=pieces, procs=procs, assignments=assignments,
        classes=classes, failures=failures, clusters=clusters, rate_cards=rate_cards,
        # process windows loaded may start up to one window before `start`
        resolver=OwnerResolver(cluster_ids=cluster_ids,
                               start=start - timedelta(seconds=MAX_WINDOW_S), end=end),
    )


def _at(spans: list[Span], at: int):
    for span in spans:
        if span.covers(at):
            return span
    return None


def _cuts(start: int, end: int, *groups) -> list[int]:
    points = {start, end}
    for items in groups:
        points.update(item.start for item in items if start < item.start < end)
        points.update(item.end for item in items
                      if item.end is not None and start < item.end < end)
    return sorted(points)


class _Sums:
    """A bucket being summed: util as hundredths × seconds (exact integers)."""

    __slots__ = ("covered_s", "busy_s", "util_c_s", "energy_j", "memory_max", "processes",
                 "users")

    def __init__(self):
        self.covered_s = self.busy_s = self.util_c_s = 0
        self.energy_j = 0.0
        self.memory_max = None
        self.processes, self.users = set(), set()

    def bucket(self) -> Bucket:
        return Bucket(covered_s=self.covered_s, busy_s=self.busy_s,
                      util_weighted=Decimal(self.util_c_s).scaleb(-2), energy_j=self.energy_j,
                      memory_used_bytes_max=self.memory_max, processes=self.processes,
                      users=self.users)


class _Live:
    """The items of a list sorted by start that cover the instant a sweep has reached."""

    def __init__(self, items: list):
        self._items, self._next, self.now = items, 0, []

    def at(self, at: int) -> list:
        items, i = self._items, self._next
        if i < len(items) and items[i].start <= at:
            while i < len(items) and items[i].start <= at:
                self.now.append(items[i])
                i += 1
            self._next = i
        if self.now:
            self.now = [item for item in self.now if item.end > at]
        return self.now


def usage_buckets(*, inputs: UsageInputs, gpu_id: int, start: datetime | None = None,
                  end: datetime | None = None) -> dict[BucketKey, Bucket]:
    """Per-bucket sums for one physical GPU over [start, end) (default: the loaded
    window). MIG devices count for the parent: covered if any covers, busy if any is
    busy, util = max; owners are those of the busy devices' processes (of the
    covering devices' when not busy); several owner teams split the window."""
    lo = inputs.start if start is None else max(inputs.start, _s(start))
    hi = inputs.end if end is None else min(inputs.end, _s(end))
    devices = inputs.devices.get(gpu_id, [gpu_id])
    # pieces in device order: several devices' energies add up in that order, as floats
    pieces = [p for d in devices for p in inputs.pieces.get(d, ()) if p.end > lo and p.start < hi]
    if not pieces:
        return {}
    rank = {device: i for i, device in enumerate(devices)}
    procs = [r for d in devices for r in inputs.procs.get(d, ()) if r.end > lo and r.start < hi]
    assignments = inputs.assignments.get(gpu_id, [])
    classes = inputs.classes.get(gpu_id, [])
    failures = inputs.failures.get(gpu_id, [])
    clusters = inputs.clusters.get(gpu_id, [])
    class_ids = {span.value for span in classes} | {inputs.current_class[gpu_id]}
    cards = [span for class_id in class_ids for span in inputs.rate_cards.get(class_id, ())]
    live_pieces = _Live(sorted(pieces, key=lambda p: (p.start, rank[p.device_id])))
    live_procs = _Live(sorted(procs, key=lambda r: r.start))
    team_id = inputs.resolver.team_id
    sums: dict[tuple, _Sums] = {}
    for a, b in pairwise(_cuts(lo, hi, pieces, procs, assignments, classes, failures, cards)):
        active = live_pieces.at(a)
        if not active:
            continue
        if len(active) > 1:
            active = sorted(active, key=lambda p: rank[p.device_id])
        seconds = b - a
        util_c = max(p.util_c for p in active)
        busy = any(p.busy for p in active)
        basis = {p.device_id for p in active if p.busy or not busy}
        seg_procs = [r for r in live_procs.at(a) if r.device_id in basis]
        klass = _at(classes, a)
        failed = _at(failures, a) is not None
        class_id = klass.value if klass else inputs.current_class[gpu_id]
        card = _at(inputs.rate_cards.get(class_id, []), a)
        card_id = card.value if card else None
        assignment = _at(assignments, a)
        if assignment is not None:
            assignment_id, reservation_id, team = assignment.value
            # the team's GPU: whoever ran there is shown to it
            keyed = [((RESERVED, class_id, assignment_id, reservation_id, team, 1, failed,
                       card_id), seg_procs)]
        else:
            node = _at(clusters, a)
            cluster_id = node.value if node else inputs.current_cluster[gpu_id]
            owner_of = [
                (r, team_id(cluster_id=cluster_id, job_source=r.job_source,
                            job_account=r.job_account, user=r.user, uid=r.uid, at_s=r.start))
                for r in seg_procs
            ]
            # split among the distinct owner teams; unattributed only when there is none
            owners = {owner for _, owner in owner_of} - {None} or {None}
            keyed = [
                ((UNRESERVED, class_id, None, None, team, len(owners), failed, card_id),
                 [r for r, owner in owner_of if owner == team])
                for team in owners
            ]
        energy = sum(p.energy_per_s * seconds for p in active if p.energy_per_s is not None)
        memories = [p.memory_max for p in active if p.memory_max is not None]
        for key, key_procs in keyed:
            bucket = sums.get(key)
            if bucket is None:
                bucket = sums[key] = _Sums()
            bucket.covered_s += seconds
            if busy:
                bucket.busy_s += seconds
            bucket.util_c_s += util_c * seconds
            bucket.energy_j += energy
            if memories:
                bucket.memory_max = max(bucket.memory_max or 0, *memories)
            if key_procs:
                bucket.processes.update((r.device_id, r.pid, r.pid_start) for r in key_procs)
                bucket.users.update(r.user for r in key_procs if r.user)
    return {BucketKey(*key): bucket.bucket() for key, bucket in sums.items()}
