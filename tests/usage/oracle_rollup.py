"""The rollup rule as it was before issue 13's backfill work (ORM rows, Decimals and a
scan of every piece and process per segment), kept verbatim with the owner resolver of
then, as the oracle the fast rule (`gpuquota.usage.rollup`) and the rows the sweep
writes (`gpuquota.usage.rollup_rows`) are checked against. Not used by the product.

The original docstring:

`usage_inputs_load` reads everything a set of physical GPUs needs over a window in
a fixed number of queries; `usage_buckets` turns it into per-bucket sums for one
GPU and any whole-second window (an hour for the stored rollups, a partial hour
at a period's edge for the selectors). Times are handled as epoch seconds.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise

from django.db.models import Q

from accounts.models import ClusterIdentity, Membership
from gpuquota.ingest.models import ProcessRecord, Sample
from gpuquota.inventory.models import Gpu, GpuClassInterval, GpuHealthInterval, GpuNodeInterval
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Assignment, Loan
from gpuquota.usage.conf import MAX_WINDOW_S, busy_util_percent

RESERVED, UNRESERVED, BORROWED = "reserved", "unreserved", "borrowed"


Kind = ClusterIdentity.Kind
_TEAM_KIND_BY_SOURCE = {"slurm": Kind.SLURM_ACCOUNT, "kubernetes": Kind.K8S_NAMESPACE}


def _identity_window(start: datetime, end: datetime) -> Q:
    return Q(valid_from__lt=end) & (Q(valid_until__isnull=True) | Q(valid_until__gt=start))


def _in_force(rows: list[tuple], at: datetime):
    for valid_from, valid_until, value in rows:
        if valid_from <= at and (valid_until is None or at < valid_until):
            return value
    return None


class OwnerResolver:
    """Resolves (cluster, process) → owner team id over [start, end)."""

    def __init__(self, *, cluster_ids: set[int], start: datetime, end: datetime):
        self._identities: dict[tuple, list[tuple]] = defaultdict(list)
        user_ids: set[int] = set()
        rows = ClusterIdentity.objects.filter(_identity_window(start, end),
                                              cluster_id__in=cluster_ids)
        for row in rows.values("cluster_id", "kind", "key", "user_id", "team_id",
                               "valid_from", "valid_until"):
            target = row["team_id"] if row["team_id"] is not None else row["user_id"]
            key = (row["cluster_id"], row["kind"], row["key"])
            self._identities[key].append((row["valid_from"], row["valid_until"], target))
            if row["user_id"] is not None:
                user_ids.add(row["user_id"])
        self._billing: dict[int, list[tuple]] = defaultdict(list)
        memberships = Membership.objects.filter(
            _identity_window(start, end), user_id__in=user_ids, is_billing=True
        )
        for row in memberships.values("user_id", "team_id", "valid_from", "valid_until"):
            self._billing[row["user_id"]].append(
                (row["valid_from"], row["valid_until"], row["team_id"])
            )

    def _identity(self, cluster_id: int, kind: str, key: str | None, at: datetime):
        if key is None or key == "":
            return None
        return _in_force(self._identities.get((cluster_id, kind, key), []), at)

    def team_id(self, *, cluster_id: int, job_source: str | None, job_account: str | None,
                user: str | None, uid: int | None, at: datetime) -> int | None:
        """The owner team id of one process window at `at`, or None (unattributed)."""
        team_kind = _TEAM_KIND_BY_SOURCE.get(job_source or "")
        if team_kind is not None:
            team_id = self._identity(cluster_id, team_kind, job_account, at)
            if team_id is not None:
                return team_id
        user_id = self._identity(cluster_id, Kind.UNIX_USER, user, at)
        if user_id is None and uid is not None:
            user_id = self._identity(cluster_id, Kind.UNIX_UID, str(uid), at)
        if user_id is None:
            return None
        return _in_force(self._billing.get(user_id, []), at)


def _s(value: datetime) -> int:
    return int(value.timestamp())


def _dt(value: int) -> datetime:
    return datetime.fromtimestamp(value, tz=UTC)


@dataclass(frozen=True)
class Piece:
    """The stretch [start, end) a sample covers on one device."""

    device_id: int
    start: int
    end: int
    util: Decimal
    busy: bool
    energy_per_s: float | None
    memory_max: int | None
    received: datetime | None = None
    receipt: int | None = None


@dataclass(frozen=True)
class Proc:
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
    loans: dict[int, list[Span]] = field(default_factory=dict)


def coverage_pieces(samples: list[dict], busy_from: Decimal) -> list[Piece]:
    """One device's samples (ordered by window_start) → what each covers: up to the
    next sample's window_start; readings = 0 or a null util cover nothing."""
    pieces = []
    for i, row in enumerate(samples):
        start, end = _s(row["window_start"]), _s(row["window_end"])
        if i + 1 < len(samples):
            end = min(end, _s(samples[i + 1]["window_start"]))
        util = row["util_gpu_avg"]
        if not row["readings"] or util is None or end <= start:
            continue
        length = _s(row["window_end"]) - start
        energy = row["energy_j"]
        pieces.append(Piece(
            device_id=row["gpu_id"], start=start, end=end, util=util, busy=util >= busy_from,
            energy_per_s=None if energy is None or length <= 0 else energy / length,
            memory_max=row["memory_used_bytes_max"], received=row["received_at"],
            receipt=row["receipt_id"],
        ))
    return pieces


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
    by_device: dict[int, list[dict]] = defaultdict(list)
    samples = Sample.objects.filter(
        gpu_id__in=device_ids,
        window_start__gte=start - timedelta(seconds=MAX_WINDOW_S),
        window_start__lt=end,
    ).order_by("gpu_id", "window_start")
    for row in samples.values("gpu_id", "window_start", "window_end", "readings",
                              "util_gpu_avg", "energy_j", "memory_used_bytes_max",
                              "received_at", "receipt_id"):
        by_device[row["gpu_id"]].append(row)
    pieces = {device: coverage_pieces(rows, busy_from) for device, rows in by_device.items()}

    procs: dict[int, list[Proc]] = defaultdict(list)
    records = ProcessRecord.objects.filter(
        gpu_id__in=device_ids, window_start__lt=end, window_end__gt=start
    )
    for row in records.values("gpu_id", "window_start", "window_end", "pid", "pid_start",
                              "uid", "user", "job_source", "job_account", "received_at",
                              "receipt_id"):
        procs[row["gpu_id"]].append(Proc(
            device_id=row["gpu_id"], start=_s(row["window_start"]), end=_s(row["window_end"]),
            pid=row["pid"], pid_start=row["pid_start"], uid=row["uid"], user=row["user"],
            job_source=row["job_source"], job_account=row["job_account"],
            received=row["received_at"], receipt=row["receipt_id"],
        ))

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
    loans: dict[int, list[Span]] = defaultdict(list)
    for loan in Loan.objects.filter(_overlapping("lent_from", "returned_at", start, end),
                                    gpu_id__in=gpu_ids):
        loans[loan.gpu_id].append(Span(_s(loan.lent_from), loan.returned_at and
                                       _s(loan.returned_at), loan.assignment_id))
    return UsageInputs(
        start=_s(start), end=_s(end), devices=devices, current_class=current_class,
        current_cluster=current_cluster, pieces=pieces, procs=procs, assignments=assignments,
        classes=classes, failures=failures, clusters=clusters, rate_cards=rate_cards, loans=loans,
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
        for item in items:
            for point in (item.start, item.end):
                if point is not None and start < point < end:
                    points.add(point)
    return sorted(points)


def usage_buckets(*, inputs: UsageInputs, gpu_id: int, start: datetime | None = None,
                  end: datetime | None = None) -> dict[BucketKey, Bucket]:
    """Per-bucket sums for one physical GPU over [start, end) (default: the loaded
    window). MIG devices count for the parent: covered if any covers, busy if any is
    busy, util = max; owners are those of the busy devices' processes (of the
    covering devices' when not busy); several owner teams split the window."""
    lo = inputs.start if start is None else max(inputs.start, _s(start))
    hi = inputs.end if end is None else min(inputs.end, _s(end))
    devices = inputs.devices.get(gpu_id, [gpu_id])
    pieces = [p for d in devices for p in inputs.pieces.get(d, ()) if p.end > lo and p.start < hi]
    buckets: dict[BucketKey, Bucket] = {}
    if not pieces:
        return buckets
    procs = [r for d in devices for r in inputs.procs.get(d, ()) if r.end > lo and r.start < hi]
    assignments = inputs.assignments.get(gpu_id, [])
    classes = inputs.classes.get(gpu_id, [])
    failures = inputs.failures.get(gpu_id, [])
    clusters = inputs.clusters.get(gpu_id, [])
    class_ids = {span.value for span in classes} | {inputs.current_class[gpu_id]}
    cards = [span for class_id in class_ids for span in inputs.rate_cards.get(class_id, ())]
    loans = inputs.loans.get(gpu_id, [])
    for a, b in pairwise(_cuts(lo, hi, pieces, assignments, classes, failures, cards, loans)):
        active = [p for p in pieces if p.start <= a < p.end]
        if not active:
            continue
        seconds = b - a
        util = max(p.util for p in active)
        busy = any(p.busy for p in active)
        basis = {p.device_id for p in active if p.busy or not busy}
        # owners follow the covering sample: its records, stored with it (same batch)
        seg_procs = [r for r in procs for p in active if p.device_id in basis
                     and (r.device_id, r.start, r.received, r.receipt)
                     == (p.device_id, p.start, p.received, p.receipt)]
        klass = _at(classes, a)
        failed = _at(failures, a) is not None
        class_id = klass.value if klass else inputs.current_class[gpu_id]
        card = _at(inputs.rate_cards.get(class_id, []), a)
        card_id = card.value if card else None
        assignment = _at(assignments, a)
        loan = _at(loans, a)
        node = _at(clusters, a)
        cluster_id = node.value if node else inputs.current_cluster[gpu_id]
        owner_of = {
            r: inputs.resolver.team_id(
                cluster_id=cluster_id, job_source=r.job_source, job_account=r.job_account,
                user=r.user, uid=r.uid, at=_dt(r.start),
            )
            for r in seg_procs
        }
        if assignment is not None and loan is not None and loan.value == assignment.value[0]:
            assignment_id, reservation_id, team_id = assignment.value
            reserved = Bucket() if (k := BucketKey(
                RESERVED, class_id, assignment_id, reservation_id, team_id, 1, failed,
                card_id)) not in buckets else buckets[k]
            buckets[k] = reserved
            reserved.covered_s += seconds
            reserved.util_weighted += util * seconds
            reserved.energy_j += sum(p.energy_per_s * seconds for p in active
                                     if p.energy_per_s is not None)
            memories = [p.memory_max for p in active if p.memory_max is not None]
            if memories:
                reserved.memory_used_bytes_max = max(reserved.memory_used_bytes_max or 0,
                                                     *memories)
            own = [r for r, owner in owner_of.items() if owner == team_id]
            reserved.processes.update((r.device_id, r.pid, r.pid_start) for r in own)
            reserved.users.update(r.user for r in own if r.user)
            if busy:
                owners = set(owner_of.values()) - {None, team_id} or {None}
                for owner in owners:
                    bucket = buckets.setdefault(BucketKey(
                        BORROWED, class_id, assignment_id, reservation_id, owner, len(owners),
                        failed, card_id), Bucket())
                    bucket.busy_s += seconds
                    mine = [r for r, o in owner_of.items()
                            if o == owner or (owner is None and o == team_id)]
                    bucket.processes.update((r.device_id, r.pid, r.pid_start) for r in mine)
                    bucket.users.update(r.user for r in mine if r.user)
            continue
        if assignment is not None:
            assignment_id, reservation_id, team_id = assignment.value
            # the team's GPU: whoever ran there is shown to it
            keyed = [(BucketKey(RESERVED, class_id, assignment_id, reservation_id, team_id, 1,
                                failed, card_id), seg_procs)]
        else:
            # split among the distinct owner teams; unattributed only when there is none
            owners = set(owner_of.values()) - {None} or {None}
            keyed = [
                (BucketKey(UNRESERVED, class_id, None, None, team_id, len(owners), failed,
                           card_id),
                 [r for r, owner in owner_of.items() if owner == team_id])
                for team_id in owners
            ]
        energy = sum(p.energy_per_s * seconds for p in active if p.energy_per_s is not None)
        memories = [p.memory_max for p in active if p.memory_max is not None]
        for key, key_procs in keyed:
            bucket = buckets.setdefault(key, Bucket())
            bucket.covered_s += seconds
            bucket.busy_s += seconds if busy else 0
            bucket.util_weighted += util * seconds
            bucket.energy_j += energy
            if memories:
                bucket.memory_used_bytes_max = max(bucket.memory_used_bytes_max or 0, *memories)
            bucket.processes.update((r.device_id, r.pid, r.pid_start) for r in key_procs)
            bucket.users.update(r.user for r in key_procs if r.user)
    return buckets
