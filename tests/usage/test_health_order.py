"""A failed interval's end depends only on sample times and boot ids (accounting.md,
Inventory: Health): the same batches, stored by the real ingestion service in any order,
late from a spool backlog, with another GPU of the node rebooting first, give the same
intervals."""

import random
from datetime import timedelta

import pytest

from gpuquota.ingest.batches import batch_ingest
from gpuquota.inventory.models import Gpu, GpuHealthInterval
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.usage.sweep import dirty_hours_process
from tests.ingest.factories import batch, enrolled, event, gpu_entry, new_gpu_uuid, sample
from tests.usage.factories import T0

pytestmark = pytest.mark.django_db
M = timedelta(minutes=1)


def _samples(uuid_, first, count, **extra):
    return [sample(uuid_, T0 + (first + i) * M, **extra) for i in range(count)]


def _scenario():
    """GPU 0 fails under boot A (XID 79, then ECC in a sample, then lost), keeps sending
    good samples under A, the node reboots (B): GPU 1 at once reports good samples, GPU 0
    first zero readings, then good ones from :28; it fails again under B at :45 and the
    next boot (C) reports a good sample at :50."""
    broken, healthy = new_gpu_uuid(), new_gpu_uuid()
    gpus = [gpu_entry(broken, index=0), gpu_entry(healthy, index=1)]

    def body(boot, samples=(), events=()):
        made = batch(gpus=gpus, samples=samples, events=events)
        made["node"]["boot_id"] = boot
        return made

    batches = [
        body("A", _samples(broken, 0, 10) + _samples(healthy, 0, 10)),
        body("A", _samples(broken, 10, 2) + _samples(broken, 12, 1, ecc_uncorrected=3)
             + _samples(broken, 13, 2) + _samples(healthy, 10, 10),
             [event(broken, T0 + 10 * M + timedelta(seconds=30))]),
        body("A", events=[event(broken, T0 + 16 * M, type_="gpu_lost")]),
        body("B", _samples(healthy, 25, 10)
             + _samples(broken, 25, 3, readings=0, util_gpu_avg=None, util_gpu_max=None)),
        body("B", _samples(broken, 28, 13)),
        body("B", events=[event(broken, T0 + 45 * M, xid=79)]),
        body("C", _samples(broken, 50, 1)),
    ]
    return broken, batches


def _settle():
    for _ in range(20):
        if not dirty_hours_process() and not DirtyGpuHour.objects.exists():
            return
    raise AssertionError("the sweep did not settle")


def _intervals(uuid_):
    gpu = Gpu.objects.get(uuid=uuid_)
    return [(i.state, i.valid_from - T0, i.valid_until and i.valid_until - T0, i.boot_id)
            for i in GpuHealthInterval.objects.filter(gpu=gpu).order_by("valid_from")]


EXPECTED = [
    ("failed", timedelta(minutes=10, seconds=30), timedelta(minutes=28), "A"),
    ("failed", timedelta(minutes=45), timedelta(minutes=50), "B"),
]


def _orders(count):
    orders = {"in order": list(range(count)), "reversed": list(range(count))[::-1]}
    for seed in (1, 2, 3, 4):
        order = list(range(count))
        random.Random(seed).shuffle(order)
        orders[f"shuffled {seed}"] = order
    return orders


@pytest.mark.parametrize("sweep_each", [True, False], ids=["sweep each", "sweep at end"])
@pytest.mark.parametrize("name", list(_orders(7)))
def test_same_batches_in_any_order_give_the_same_intervals(name, sweep_each):
    node = enrolled().node
    broken, batches = _scenario()
    for offset, index in enumerate(_orders(len(batches))[name]):
        # received one minute apart in this order, whatever their contents
        batch_ingest(node=node, body=batches[index], now=T0 + (60 + offset) * M,
                     check_age=False)
        if sweep_each:
            _settle()
    _settle()
    assert _intervals(broken) == EXPECTED


def test_late_from_a_spool_backlog_gives_the_same_intervals():
    """The agent was cut off all along: every batch arrives two days later, one second
    apart, after the node has rebooted twice (the receipts all follow boot C)."""
    node = enrolled().node
    broken, batches = _scenario()
    late = T0 + timedelta(days=2)
    for offset, body in enumerate(batches):
        batch_ingest(node=node, body=body, now=late + timedelta(seconds=offset),
                     check_age=False)
    _settle()
    assert _intervals(broken) == EXPECTED


def test_a_reboot_seen_first_on_another_gpu_of_the_node_changes_nothing():
    """Boot B arrives first with only the healthy GPU's samples: the broken GPU stays
    failed until a good sample of its own under another boot."""
    node = enrolled().node
    broken, batches = _scenario()
    for offset, index in enumerate([0, 1, 2, 3]):
        batch_ingest(node=node, body=batches[index], now=T0 + (60 + offset) * M,
                     check_age=False)
        _settle()
    assert _intervals(broken) == [("failed", timedelta(minutes=10, seconds=30), None, "A")]
    batch_ingest(node=node, body=batches[4], now=T0 + 70 * M, check_age=False)
    _settle()
    assert _intervals(broken)[0][2] == timedelta(minutes=28)
