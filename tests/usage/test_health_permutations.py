"""Health does not depend on arrival order (accounting.md, Inventory: Health): every
order of a small history mixing events, reboots and an admin's back-dated recovery,
stored by the real ingestion service and swept after each arrival, gives the same
health intervals and the same rollups.

The orders are walked as a tree: each arrival is applied once for all the orders that
share the arrivals before it, in a savepoint rolled back when its orders are done (325
arrivals for the 120 orders of five, not 600), and every failing order is named."""

from datetime import timedelta

import pytest
from django.db import transaction

from gpuquota.ingest.batches import batch_ingest
from gpuquota.ingest.health import gpu_health_recover
from gpuquota.inventory.models import Gpu, GpuHealthInterval
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import AdminFactory
from tests.ingest.factories import batch, enrolled, event, gpu_entry, new_gpu_uuid, sample
from tests.usage.factories import T0

pytestmark = pytest.mark.django_db
M = timedelta(minutes=1)
H = timedelta(hours=1)
RECOVERED_AT = T0 + 90 * M


def _samples(uuid_, first, count):
    return [sample(uuid_, T0 + (first + i) * M) for i in range(count)]


def _body(uuid_, boot, samples=(), events=()):
    made = batch(gpus=[gpu_entry(uuid_)], samples=samples, events=events)
    made["node"]["boot_id"] = boot
    return made


def _history(uuid_):
    """The GPU fails under boot A at :10 (XID 79) and keeps reporting under A for two
    hours; what follows arrives in any order: an XID 94 at 2:20 under A (its hour has no
    samples), the admin's recovery dated 1:30, boot B's good samples from 3:00, a
    `gpu_lost` under B at 3:30, boot C's good samples from 4:00."""
    first = _body(uuid_, "A", _samples(uuid_, 0, 120), [event(uuid_, T0 + 10 * M, xid=79)])
    rest = {
        "degraded": _body(uuid_, "A", events=[event(uuid_, T0 + 140 * M, xid=94)]),
        "boot B": _body(uuid_, "B", _samples(uuid_, 180, 20)),
        "lost": _body(uuid_, "B", events=[event(uuid_, T0 + 210 * M, type_="gpu_lost")]),
        "boot C": _body(uuid_, "C", _samples(uuid_, 240, 20)),
    }
    return first, rest


def _settle():
    for _ in range(20):
        if not dirty_hours_process() and not DirtyGpuHour.objects.exists():
            return
    raise AssertionError("the sweep did not settle")


def _every_order(names, arrive, check, done=()):
    """`check(order)` after each order of `names`, `arrive(name, position)` applying one
    arrival (position 1 first) on top of the arrivals of `done`."""
    if not names:
        check(done)
        return
    for name in names:
        savepoint = transaction.savepoint()
        arrive(name, len(done) + 1)
        _every_order([other for other in names if other != name], arrive, check, (*done, name))
        transaction.savepoint_rollback(savepoint)


def _failing_orders(first, rest, recovery, expect):
    """The number of orders walked, and those (as "a > b > ...") where `expect(gpu)`
    names a difference, after `first` and then `rest`'s arrivals and the recovery
    (`recovery(gpu)`) in every order."""
    node = enrolled().node
    batch_ingest(node=node, body=first, now=T0 + 300 * M, check_age=False)
    _settle()
    gpu_id = Gpu.objects.get(uuid=first["gpus"][0]["uuid"]).pk
    walked, failing = [], []

    def arrive(name, position):
        if name == "recovery":
            recovery(Gpu.objects.get(pk=gpu_id))
        else:
            batch_ingest(node=node, body=rest[name], now=T0 + (300 + position) * M,
                         check_age=False)
        _settle()

    def check(order):
        walked.append(order)
        if (got := expect(Gpu.objects.get(pk=gpu_id))) is not None:
            failing.append(f"{' > '.join(order)}: {got}")

    _every_order([*rest, "recovery"], arrive, check)
    return len(set(walked)), failing


def _intervals(gpu):
    return [(i.state, i.valid_from - T0, i.valid_until and i.valid_until - T0, i.boot_id,
             i.closed_reason, i.closed_by_id is not None)
            for i in GpuHealthInterval.objects.filter(gpu=gpu).order_by("valid_from")]


def _rollups(gpu):
    return sorted((r.hour - T0, r.kind, r.failed, r.covered_s, r.busy_s)
                  for r in GpuHourUsage.objects.filter(gpu=gpu))


EXPECTED = [
    ("failed", 10 * M, 90 * M, "A", "reseated the card", True),
    ("degraded", 140 * M, 210 * M, "A", "became failed: gpu_lost", False),
    ("failed", 210 * M, 240 * M, "B", "new boot C and a good sample", False),
]
ROLLUPS = [
    (timedelta(0), "unreserved", False, 600, 600),
    (timedelta(0), "unreserved", True, 3000, 3000),
    (H, "unreserved", False, 1800, 1800),
    (H, "unreserved", True, 1800, 1800),
    (3 * H, "unreserved", False, 1200, 1200),
    (4 * H, "unreserved", False, 1200, 1200),
]


def _differs(gpu, intervals, rollups):
    """What differs from the expected intervals and rollups, or None."""
    got = (_intervals(gpu), _rollups(gpu))
    return None if got == (intervals, rollups) else f"intervals {got[0]}, rollups {got[1]}"


def test_every_arrival_order_gives_the_same_intervals_and_rollups():
    admin = AdminFactory()
    first, rest = _history(new_gpu_uuid())
    walked, failing = _failing_orders(
        first, rest,
        lambda gpu: gpu_health_recover(gpu=gpu, at=RECOVERED_AT, by=admin,
                                       note="reseated the card"),
        lambda gpu: _differs(gpu, EXPECTED, ROLLUPS))
    assert walked == 120 and not failing, "\n".join(failing)


def _earlier_failure_history(uuid_):
    """An XID 94 at :40 under A (the GPU reports under A all hour); then in any order:
    the admin's recovery dated :50 (it ends whatever is in force then), an XID 79 at :20
    under A that arrives late, another XID 94 at 1:10, boot B's good samples from 1:30."""
    first = _body(uuid_, "A", _samples(uuid_, 0, 60), [event(uuid_, T0 + 40 * M, xid=94)])
    rest = {
        "failure": _body(uuid_, "A", events=[event(uuid_, T0 + 20 * M, xid=79)]),
        "degraded": _body(uuid_, "A", events=[event(uuid_, T0 + 70 * M, xid=94)]),
        "boot B": _body(uuid_, "B", _samples(uuid_, 90, 10)),
    }
    return first, rest


def test_a_late_failure_takes_over_the_recovery_of_the_degraded_interval_it_covers():
    """In time order the failure at :20 covers the XID 94 at :40 and the recovery at :50
    ends it; arriving after the recovery ended the degraded interval, it must end there
    too (not at :40, leaving a recovered degraded interval behind), in every order."""
    admin = AdminFactory()
    first, rest = _earlier_failure_history(new_gpu_uuid())
    walked, failing = _failing_orders(
        first, rest,
        lambda gpu: gpu_health_recover(gpu=gpu, at=T0 + 50 * M, by=admin,
                                       note="reseated the card"),
        lambda gpu: _differs(gpu, [
            ("failed", 20 * M, 50 * M, "A", "reseated the card", True),
            ("degraded", 70 * M, None, "A", "", False),
        ], [
            (timedelta(0), "unreserved", False, 1800, 1800),
            (timedelta(0), "unreserved", True, 1800, 1800),
            (H, "unreserved", False, 600, 600),
        ]))
    assert walked == 24 and not failing, "\n".join(failing)
