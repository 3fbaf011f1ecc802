"""The base rates the detectors test against leave the lemons out: a weak lemon is not
hidden by the strong ones' incidents in its class's rate, and a class's rise spread over
healthy GPUs is not dropped with its repeat failures (docs/reliability.md#lemons, #drift)."""

from datetime import timedelta

import pytest

from gpuquota.ingest.models import GpuEvent
from gpuquota.reliability.drift import drift
from gpuquota.reliability.lemons import lemons
from tests.factories import GpuClassFactory, NodeFactory, make_gpu
from tests.reliability.factories import event_add


@pytest.fixture
def gpus(db, clock):
    """40 GPUs of one class on 10 nodes, in service for 200 days."""
    klass = GpuClassFactory(name="A100-80GB")
    nodes = [NodeFactory(hostname=f"a{i:02d}") for i in range(10)]
    return [make_gpu(node=nodes[i // 4], gpu_class=klass, index=i % 4,
                     at=clock.now - timedelta(days=200)) for i in range(40)]


def _fail(gpu, at, days) -> None:
    for day in days:
        event_add(gpu, at - timedelta(days=day, hours=gpu.index), 79)


def test_a_weak_lemon_is_not_hidden_by_the_strong_ones(gpus, clock):
    """Two GPUs failing 12 times each would make the class's rate about 0.6 incidents a GPU
    in 180 days, at which 3 are unremarkable (p 0.03 against 0.25 / 40); left out of the
    base rate (flagged themselves), the other GPUs' 3 failures give 0.08, and the GPU
    with 3 is flagged; one failure each stays unremarkable."""
    strong, weak = gpus[:2], gpus[10]
    for gpu in strong:
        _fail(gpu, clock.now, range(5, 170, 14))
    _fail(weak, clock.now, (150, 90, 20))
    for gpu in gpus[20:23]:
        _fail(gpu, clock.now, (60,))
    flags = {f.key: f for f in lemons(as_of=clock.now)}
    assert set(flags) == {g.uuid for g in (*strong, weak)}
    assert flags[weak.uuid].expected == pytest.approx(3 / 37, abs=0.001)
    assert flags[weak.uuid].evidence[0] == (
        "3 failures and 0 hardware warnings in 180 days where its class would see 0.08 in all")


def test_a_class_rise_counts_gpus_failing_often_that_are_no_lemons(gpus, clock):
    """The class fails at about four times its rate in the last week: 15 GPUs spread over
    its nodes fail once each, GPUs that had failed twice before (3 failures in the windows:
    the old rule's repeat offenders, left out with their recent failures). None is a lemon
    (3 is no surprise at the class's rate), so the class drifts; a lemon's own burst does
    not make it drift."""
    rising = gpus[0::4] + gpus[1:20:4]
    for gpu in rising:
        _fail(gpu, clock.now, (80, 40, 3))
    for gpu in gpus[2::4] + gpus[21::4]:
        _fail(gpu, clock.now, (60,))
    assert lemons(as_of=clock.now) == []
    assert [(d.kind, d.key) for d in drift(as_of=clock.now) if d.kind == "class"] == [
        ("class", "A100-80GB")]
    # without the rise: a lemon's six failures in the last week are the lemon's, not the class's
    GpuEvent.objects.filter(gpu__in=rising, ts__gte=clock.now - timedelta(days=7)).delete()
    _fail(gpus[35], clock.now, (1, 2, 3, 4, 5, 6))
    assert [f.key for f in lemons(as_of=clock.now)] == [gpus[35].uuid]
    assert not [d for d in drift(as_of=clock.now) if d.kind == "class"]
