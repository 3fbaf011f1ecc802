"""Foreign use and the jobs of a team's reservations at a fixed number of queries, whatever
the reservations (issue 34: the cluster page issued about four per held reservation, the
team page two), with the same answers as one reservation at a time gave."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpuquota.core.timeutil import Period
from gpuquota.schedulers.backend import owned_name
from gpuquota.schedulers.models import ReservationBinding, SlurmJob
from gpuquota.schedulers.selectors import foreign_use
from gpuquota.schedulers.slurm.objects import RunningGpu
from gpuquota.schedulers.slurm.running import running_gpus_record
from gpuquota.schedulers.slurm.selectors import BY_GPUS, BY_NODES, holds_jobs
from tests.schedulers.conftest import NOW, Site

NODES = ("node-a", "node-b", "node-c", "node-d")
PERIOD = Period(NOW - timedelta(days=30), NOW + timedelta(days=1))


@pytest.fixture
def site(db):
    return Site(nodes=NODES)


def job(site, job_id: str, *, account="speech", nodes="node-a", minutes_ago=60, **fields):
    return SlurmJob.objects.create(
        cluster=site.cluster, job_id=job_id, submitted_at=NOW - timedelta(minutes=minutes_ago),
        started_at=NOW - timedelta(minutes=minutes_ago), state="RUNNING", account=account,
        user="bob", qos="normal", nodes=nodes, gpu_tres="gres/gpu:h100=1", gpus=1, **fields)


def seen(site, job_id: str, node: str, *indices: int, account="speech"):
    running_gpus_record(cluster=site.cluster, at=NOW - timedelta(minutes=30),
                        gpus=[RunningGpu(job_id, account, "bob", node, i) for i in indices],
                        node_name=lambda h: h)


def whole_node_with_foreign_jobs(site, node: str):
    """Node reserved whole by vision; speech ran one job seen on GPU 1 and one never seen."""
    r = site.reserve("vision", site.gpus[node], start=NOW - timedelta(hours=2),
                     end=NOW + timedelta(hours=2))
    ReservationBinding.objects.create(reservation=r, level="whole_nodes", why="whole",
                                      updated_at=r.start)
    job(site, f"{node}-seen", nodes=node)
    seen(site, f"{node}-seen", node, 1)
    job(site, f"{node}-short", nodes=f"{node},elsewhere")
    job(site, f"{node}-own", account="vision", nodes=node)  # the team's own: not foreign
    seen(site, f"{node}-own", node, 2, account="vision")
    return r


def foreign_use_counted():
    with CaptureQueriesContext(connection) as queries:
        found = foreign_use(period=PERIOD)
    return found, len(queries)


def test_foreign_use_issues_the_same_queries_for_one_reservation_as_for_four(site):
    whole_node_with_foreign_jobs(site, "node-a")
    one, queries_one = foreign_use_counted()
    assert {(f.job, f.evidence, f.gpus, f.nodes) for f in one} == {
        ("node-a-seen", BY_GPUS, ("node-a:1",), ("node-a",)),
        ("node-a-short", BY_NODES, (), ("node-a",)),
    }
    for node in NODES[1:]:
        whole_node_with_foreign_jobs(site, node)
    four, queries_four = foreign_use_counted()
    assert len(four) == 8 and {f.reserving_team for f in four} == {"vision"}
    assert {f.using_team for f in four} == {"speech"}
    assert queries_four == queries_one


def test_the_jobs_of_several_reservations_are_read_at_once_and_each_keeps_its_own(site):
    a = site.reserve("vision", site.gpus["node-a"])
    b = site.reserve("speech", site.gpus["node-b"][:2])
    for n in range(12):  # in a's Slurm reservation: the latest 10, newest first
        job(site, f"named-{n}", account="vision", minutes_ago=100 - n,
            reservation=owned_name("res", a.pk))
    job(site, "on-b", nodes="node-b")
    seen(site, "on-b", "node-b", 0, 1, 3)  # GPU 3 of node-b is not b's
    job(site, "on-c", nodes="node-c")
    seen(site, "on-c", "node-c", 0)
    with CaptureQueriesContext(connection) as queries:
        found = holds_jobs([a, b])
    assert [j.job_id for j in found[a.pk]] == [f"named-{n}" for n in range(11, 1, -1)]
    assert [(j.job_id, j.gpus_seen) for j in found[b.pk]] == [("on-b", "node-b:0, node-b:1")]
    assert len(queries) == 4
