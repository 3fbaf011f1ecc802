"""The idle check of a lending pass sums each GPU's samples in SQL (issue 34: at 10,000 GPUs
it read 300,000 sample rows into Python every minute): the same queries and one row per GPU
whatever the number of GPUs and samples, and the same verdicts as before."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpuquota.lending.idle import Candidate, gpus_idle
from tests.lending.factories import (
    BORROWER_USER,
    IDLE,
    MIN,
    NOW,
    OWNER_USER,
    STRANGER,
    World,
    held_gpus,
    samples,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def world(settings):
    settings.LEND_AFTER_IDLE_S = int(IDLE.total_seconds())
    return World.create(gpus=8)


def candidates(world, reservation):
    return [Candidate(gpu_id=g.id, cluster_id=world.cluster.id, team_id=world.team.id,
                      since=NOW - IDLE) for g in held_gpus(reservation)]


def test_verdicts_busy_owner_unreported_idle(world):
    gpus = held_gpus(world.reserve(count=4))
    idle, busy, owner, unreported = gpus
    samples(idle, start=NOW - IDLE - 5 * MIN, end=NOW + MIN, util=0)  # edges clipped
    samples(busy, start=NOW - IDLE, end=NOW, util=0)
    samples(busy, start=NOW - 3 * MIN, end=NOW - 2 * MIN + timedelta(seconds=30), util=60,
            window_s=30)
    samples(owner, start=NOW - IDLE, end=NOW, util=0, users=(OWNER_USER,))
    samples(unreported, start=NOW - 5 * MIN, end=NOW, util=0)
    found = gpus_idle(candidates=[Candidate(g.id, world.cluster.id, world.team.id, NOW - IDLE)
                                  for g in gpus], now=NOW)
    assert found == {idle.id}


def test_queries_and_rows_do_not_grow_with_the_gpus_or_their_samples(world):
    def cost(count: int) -> tuple[int, int]:
        reservation = world.reserve(count=count)
        for gpu in held_gpus(reservation):
            samples(gpu, start=NOW - IDLE, end=NOW, util=0, window_s=20)
        with CaptureQueriesContext(connection) as queries:
            found = gpus_idle(candidates=candidates(world, reservation), now=NOW)
        assert len(found) == count
        with connection.cursor() as cursor:  # what the idle check read: one row per GPU
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {queries[0]['sql']}")
            rows = cursor.fetchone()[0][0]["Plan"]["Actual Rows"]
        return len(queries), rows

    small_queries, small_rows = cost(1)
    large_queries, large_rows = cost(3)
    assert small_queries == large_queries
    assert (small_rows, large_rows) == (1, 3)  # not 90 and 270 samples


def test_owners_are_resolved_with_the_mappings_the_processes_name_only(world):
    """The idle check and the borrowers' read resolved owners with every account,
    namespace and user mapping of the clusters (20,000 at 100,000 GPUs): only those the
    processes name are read now, the same owners."""
    from accounts.models import ClusterIdentity
    from gpuquota.lending.idle import borrower_team_ids_by_gpu
    from tests.factories import ClusterIdentityFactory, TeamFactory

    for n in range(20):  # other teams' accounts on the cluster, which no process names
        ClusterIdentityFactory(cluster=world.cluster, kind=ClusterIdentity.Kind.SLURM_ACCOUNT,
                               key=f"unnamed-{n}", team=TeamFactory(slug=f"unnamed-{n}"),
                               user=None)
    owner, borrowed, stranger, quiet = held_gpus(world.reserve(count=4))
    samples(owner, start=NOW - IDLE, end=NOW, util=0, users=(OWNER_USER,))
    samples(borrowed, start=NOW - IDLE, end=NOW, util=90, users=(BORROWER_USER,))
    samples(stranger, start=NOW - IDLE, end=NOW, util=90, users=(STRANGER,))
    samples(quiet, start=NOW - IDLE, end=NOW, util=0)
    gpus = [owner, borrowed, stranger, quiet]
    found = [Candidate(g.id, world.cluster.id, world.team.id, NOW - IDLE) for g in gpus]
    with CaptureQueriesContext(connection) as queries:
        borrowers = borrower_team_ids_by_gpu(candidates=found, until=NOW)
        idle = gpus_idle(candidates=found, now=NOW)
    assert borrowers == {owner.id: set(), borrowed.id: {world.other_team.id},
                         stranger.id: {None}, quiet.id: set()}
    assert idle == {quiet.id}
    mappings = [q["sql"] for q in queries if 'FROM "accounts_clusteridentity"' in q["sql"]]
    assert len(mappings) == 2 and all("unnamed" not in sql and "'sam'" in sql
                                      for sql in mappings)
    assert all("'slurm_account'" not in sql for sql in mappings)  # no process of Slurm
