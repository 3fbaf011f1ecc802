"""A scale check in the style of Kueue's, small enough for CI: bench.fleet_scale's fleet at
64 and 128 GPUs (twice the nodes, reservations, loans, samples and Slurm jobs; the same
8 teams, each with reservations at both sizes), every
loop of the beat schedule run to its steady state at each size, and no loop's queries may
grow with the fleet, except the three known to work one object at a time (named below, with
their figures in docs/benchmarks.md#fleet-scale); nor may any page of
bench.fleet_scale_pages (a query per reservation, binding or GPU on a page is what this
catches), the reliability page and the fleet's summary reading the snapshots their loops
wrote. Each loop's steady run and each page's request at 128 GPUs must also stay within its
calibrated number of queries and CPU seconds (tests/bench/scale_thresholds.py says how they
were set and how to recalibrate). The large configurations are the benches."""

from datetime import UTC, datetime

import pytest
import time_machine

from bench.fleet_scale import loop_run
from bench.fleet_scale_pages import page_get, pages
from bench.fleet_scale_seed import fleet_grow, hardware_events_add
from bench.fleet_scale_slurm import slurm_fake_install
from tests.bench import scale_thresholds

NOW = datetime(2026, 12, 1, 10, 40, tzinfo=UTC)
#: Loops whose queries grow with the objects they write, one transaction each (issue 34).
PER_OBJECT = {
    "reclaim-evaluate": "a transaction per reservation with a finding",
    "statements-month-start": "a few queries per team with a statement",
    "statements-refresh-open": "a few queries per team with a statement",
}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=False)
def test_no_loop_nor_page_issues_more_queries_on_a_larger_fleet(tmp_path, settings, client):
    from accounts.models import User
    from gpuquota.celery import app, collect_beat_schedule
    from gpuquota.inventory.models import Gpu
    from gpuquota.reliability.models import FiguresSnapshot
    from gpuquota.usage.models import FleetSummarySnapshot

    settings.LENDING_ENABLED = True
    entries = collect_beat_schedule()
    steady: dict[int, dict[str, int]] = {}
    measured: dict[str, dict[str, dict]] = {"loops": {}, "pages": {}}  # at 128 GPUs
    on_pages: dict[int, dict[str, int]] = {}
    with time_machine.travel(NOW, tick=False):
        for size in (64, 128):
            after = Gpu.objects.order_by("-id").values_list("id", flat=True).first() or 0
            fleet_grow(size, NOW, hours=1)
            hardware_events_add(NOW, after_gpu_id=after)
            slurm_fake_install(tmp_path, NOW, jobs_per_gpu_day=3)
            steady[size] = {}
            for name, entry in entries.items():
                loop_run(app, entry)  # the first run lends, drafts, imports: then steady
                run = loop_run(app, entry)
                steady[size][name] = run["queries"]
                measured["loops"][name] = {"queries": run["queries"],
                                           "cpu_s": run["cpu"] + run["pg"]}
            # the reliability page and the fleet's summary cards read what their loops
            # wrote (reliability.figures, usage.fleet_summary), not a count of their own
            assert list(FiguresSnapshot.objects.values_list("as_of", flat=True)) == [NOW]
            assert list(FleetSummarySnapshot.objects.values_list("gpus", flat=True)) == [size]
            client.force_login(User.objects.get(username="bench-admin"))
            on_pages[size] = {}
            for name, url in pages(team="team-0", cluster="cluster-0").items():
                got = page_get(client, url)
                assert got["status"] == 200, (name, got)
                on_pages[size][name] = got["queries"]
                measured["pages"][name] = {"queries": got["queries"],
                                           "cpu_s": got["cpu"] + got["pg"]}
    grew = {name: (steady[64][name], steady[128][name]) for name in entries
            if steady[128][name] > steady[64][name] and name not in PER_OBJECT}
    assert grew == {}, f"queries grew with the fleet (64 -> 128 GPUs): {grew}"
    assert steady[128]["reclaim-evaluate"] > steady[64]["reclaim-evaluate"], steady
    grew = {name: (on_pages[64][name], on_pages[128][name]) for name in on_pages[64]
            if on_pages[128][name] > on_pages[64][name]}
    assert grew == {}, f"a page's queries grew with the fleet (64 -> 128 GPUs): {grew}"
    if (path := scale_thresholds.recording()) is not None:
        scale_thresholds.record(path, measured)  # calibrating: the thresholds are being set
        return
    over = scale_thresholds.over(measured)
    assert over == {}, f"past the calibrated thresholds at 128 GPUs: {over}"
