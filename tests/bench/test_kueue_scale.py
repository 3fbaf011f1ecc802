"""The Kubernetes backend with Kueue in the CI scale check's fleet (issue 34): the site of
bench.fleet_scale_kueue (every cluster Kubernetes with Kueue behind the fake API server, here
in a thread; pods, Workloads, evicted pods, returned loans) at 64 and 128 GPUs. A steady
reconcile sends no write, one team changed sends one PATCH (the bench checks both), and no
loop's queries or API calls grow with the fleet: a GET per object where a LIST would do, or
a query per team, queue or loan, is what this catches. The same in the exact-GPU (DRA) mode
(`--dra`: Kubernetes 1.37, a ResourceSlice per node, the pods' claims; a claim template per
reservation and a DeviceTaintRule per reserved GPU written): no call nor query per GPU,
claim or slice. The large sizes are the bench."""

from datetime import UTC, datetime

import pytest
import time_machine

from bench.fleet_scale_kube import Site, kube_fake_install
from bench.fleet_scale_kueue import size_measure
from bench.fleet_scale_seed import fleet_grow

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)  # at the hour: the seed writes no samples


@pytest.mark.postgres
@pytest.mark.kubernetes
@pytest.mark.django_db(transaction=False)
@pytest.mark.parametrize(("dra", "steady_gets"), [(False, 9), (True, 12)])
def test_kueue_loops_send_no_more_calls_nor_queries_on_a_larger_fleet(dra, steady_gets):
    from gpuquota.celery import app, collect_beat_schedule

    entries = collect_beat_schedule()
    site = Site(fork=False, dra=dra)
    measured: dict[int, dict[str, dict]] = {}
    try:
        with time_machine.travel(NOW, tick=False):
            for size in (64, 128):
                fleet_grow(size, NOW, hours=0)
                kube_fake_install(site, NOW)
                measured[size] = size_measure(app, entries, site, size, runs=1)
    finally:
        site.stop()
    steady = [name for name in measured[64] if not name.endswith("-first")]
    assert "kueue-reconcile-steady" in steady and "kubernetes-returns-observe" in steady
    grew = {
        name: {what: (count(measured[64][name]), count(measured[128][name]))}
        for name in steady
        for what, count in (
            ("queries", lambda m: m["queries"]),
            ("api calls", lambda m: sum(m["api"].values())),
        )
        if count(measured[128][name]) > count(measured[64][name])
    }
    assert grew == {}, f"grew with the fleet (64 -> 128 GPUs): {grew}"
    # 9: the capabilities' one LIST of ResourceSlices (a GPU drain by DeviceTaintRule or the
    # node's) is per cluster, not per object; in the DRA mode 3 more: the DeviceTaintRules'
    # discovery and the LISTs of claim templates and DeviceTaintRules
    assert measured[128]["kueue-reconcile-steady"]["api"] == {"GET": steady_gets}
