"""What the rollup rule reads, loaded in a fixed number of queries (accounting.md, Usage
samples): samples as the stretches they cover, process windows, and the intervals of
assignments, loans, classes, failures, nodes and rate cards, over a window, for a set of
physical GPUs. Times are epoch seconds and utilizations integer hundredths (the
samples' exact two decimals), computed by the database, so the bulk rows load as
plain integers.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

from django.db.models import BigIntegerField, FilteredRelation, Func, IntegerField, Q

from gpuquota.ingest.models import ProcessRecord, Sample
from gpuquota.inventory.models import Gpu, GpuClassInterval, GpuHealthInterval, GpuNodeInterval
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Assignment
from gpuquota.usage.conf import MAX_WINDOW_S, busy_util_percent
from gpuquota.usage.owners import OwnerResolver


def epoch_s(value: datetime) -> int:
    return int(value.timestamp())


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
    """The stretch [start, end) a sample covers on one device (util in hundredths);
    `start` is the sample's window_start, `received` when it was stored and `receipt` the
    batch that stored it."""

    device_id: int
    start: int
    end: int
    util_c: int
    busy: bool
    energy_per_s: float | None
    memory_max: int | None
    received: datetime | None = None
    receipt: int | None = None

    @property
    def sample_key(self) -> tuple:
        """What the process records stored with this sample share with it: its batch's
        receipt (rows stored before records kept one: the arrival instant only)."""
        return (self.device_id, self.start, self.received, self.receipt)


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
    received: datetime | None = None
    receipt: int | None = None

    @property
    def sample_key(self) -> tuple:
        """The sample it was stored with: same device and window_start, same batch."""
        return (self.device_id, self.start, self.received, self.receipt)


@dataclass(frozen=True)
class Span:
    """An interval with a payload: an assignment, a class, a failure, a node."""

    start: int
    end: int | None
    value: object

    def covers(self, at: int) -> bool:
        return self.start <= at and (self.end is None or at < self.end)


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
    loans: dict[int, list[Span]] = field(default_factory=dict)  # value: the assignment id
    #: per (table, device): its items by start, their starts, the longest (`usage_buckets`)
    timelines: dict[tuple[str, int], tuple] = field(default_factory=dict)


def sample_pieces(samples: list[tuple], busy_from: Decimal) -> list[Piece]:
    """One device's samples (gpu_id, start_s, end_s, readings, util_c, energy_j,
    memory_max, received_at, receipt_id), ordered by start → what each covers: up to the
    next sample's start; readings = 0 or a null util cover nothing; busy when util >=
    busy_from, exactly."""
    busy_from_c = busy_from * 100
    pieces = []
    last = len(samples) - 1
    for i, (device_id, start, window_end, readings, util_c, energy, memory,
            received, receipt) in enumerate(samples):
        end = window_end if i == last else min(window_end, samples[i + 1][1])
        if not readings or util_c is None or end <= start:
            continue
        length = window_end - start
        pieces.append(Piece(
            device_id, start, end, util_c, util_c >= busy_from_c,
            None if energy is None or length <= 0 else energy / length, memory, received,
            receipt,
        ))
    return pieces


def coverage_pieces(samples: list[dict], busy_from: Decimal) -> list[Piece]:
    """`sample_pieces` for samples read as model field dicts (ordered by window_start)."""
    return sample_pieces([
        (row["gpu_id"], epoch_s(row["window_start"]), epoch_s(row["window_end"]),
         row["readings"],
         None if row["util_gpu_avg"] is None else int(row["util_gpu_avg"] * 100),
         row["energy_j"], row["memory_used_bytes_max"], row.get("received_at"),
         row.get("receipt_id"))
        for row in samples], busy_from)


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
            Hundredths("util_gpu_avg"), "energy_j", "memory_used_bytes_max", "received_at",
            "receipt_id"):
        by_device[row[0]].append(row)
    pieces = {device: sample_pieces(rows, busy_from) for device, rows in by_device.items()}

    procs: dict[int, list[Proc]] = defaultdict(list)
    records = ProcessRecord.objects.filter(
        gpu_id__in=device_ids, window_start__lt=end, window_end__gt=start
    )
    for row in records.values_list(
            "gpu_id", EpochSeconds("window_start"), EpochSeconds("window_end"), "pid",
            "pid_start", "uid", "user", "job_source", "job_account", "received_at",
            "receipt_id"):
        procs[row[0]].append(Proc._make(row))

    assignments: dict[int, list[Span]] = defaultdict(list)
    loans: dict[int, list[Span]] = defaultdict(list)  # read with their assignments: no query
    rows = Assignment.objects.filter(
        _overlapping("assigned_from", "assigned_until", start, end), gpu_id__in=gpu_ids
    ).annotate(loan=FilteredRelation("loans", condition=Q(loans__lent_from__lt=end) & (
        Q(loans__returned_at__isnull=True) | Q(loans__returned_at__gt=start)))
    ).values("id", "gpu_id", "assigned_from", "assigned_until", "reservation_id",
             "reservation__team_id", "reservation__start", "reservation__approved_at",
             "loan__lent_from", "loan__returned_at")
    seen = set()
    for row in rows:
        if row["loan__lent_from"] is not None:
            until = row["loan__returned_at"]
            loans[row["gpu_id"]].append(Span(epoch_s(row["loan__lent_from"]),
                                              None if until is None else epoch_s(until),
                                              row["id"]))
        if row["id"] in seen:
            continue  # another of its loans
        seen.add(row["id"])
        # Reserved time starts at the reservation's charged start: max(start, approved_at).
        charged_from = max(row["assigned_from"], row["reservation__start"],
                           row["reservation__approved_at"] or row["reservation__start"])
        if charged_from < row["assigned_until"]:
            assignments[row["gpu_id"]].append(Span(
                epoch_s(charged_from), epoch_s(row["assigned_until"]),
                (row["id"], row["reservation_id"], row["reservation__team_id"]),
            ))

    def spans(queryset, value_field: str) -> dict[int, list[Span]]:
        result: dict[int, list[Span]] = defaultdict(list)
        for row in queryset.values("gpu_id", "valid_from", "valid_until", value_field):
            until = row["valid_until"]
            result[row["gpu_id"]].append(
                Span(epoch_s(row["valid_from"]), None if until is None else epoch_s(until),
                     row[value_field])
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
            Span(epoch_s(row["valid_from"]), None if until is None else epoch_s(until),
                 row["id"]))
    cluster_ids = set(current_cluster.values()) | {
        span.value for values in clusters.values() for span in values
    }
    return UsageInputs(
        start=epoch_s(start), end=epoch_s(end), devices=devices, current_class=current_class,
        current_cluster=current_cluster, pieces=pieces, procs=procs, assignments=assignments,
        classes=classes, failures=failures, clusters=clusters, rate_cards=rate_cards,
        loans=loans,
        # process windows loaded may start up to one window before `start`; only their
        # mappings are read (not every account of the clusters)
        resolver=OwnerResolver(cluster_ids=cluster_ids,
                               start=start - timedelta(seconds=MAX_WINDOW_S), end=end,
                               processes=[p for device in procs.values() for p in device]),
    )
