"""A reconcile's queries do not grow with the reservations it plans (issue 34: the bindings
were two queries per reservation, ~1,900 queries per pass at 10,000 GPUs)."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpuquota.schedulers.models import ReservationBinding
from gpuquota.schedulers.reconcile import cluster_reconcile
from tests.schedulers.conftest import NOW

pytestmark = pytest.mark.django_db


def steady_queries(memory, hours: range) -> int:
    """Book one reservation of one GPU per hour of `hours`, reconcile twice (the second run
    has nothing to apply) and return the second run's queries."""
    gpus = memory.gpus["node-a"] + memory.gpus["node-b"]
    for k in hours:
        memory.reserve("vision", [gpus[k % len(gpus)]], start=NOW + timedelta(hours=k),
                       end=NOW + timedelta(hours=k, minutes=50))
    cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW)
    with CaptureQueriesContext(connection) as queries:
        summary = cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW)
    assert summary.outcome == "ok", summary
    return len(queries)


def test_steady_reconcile_queries_are_the_same_for_2_and_12_reservations(memory):
    few = steady_queries(memory, range(2))
    many = steady_queries(memory, range(2, 12))
    assert ReservationBinding.objects.count() == 12
    assert many == few


def test_bindings_follow_the_plan(memory):
    r = memory.reserve("vision", memory.gpus["node-a"][:1])
    cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW)
    binding = ReservationBinding.objects.get(reservation=r)
    assert (binding.level, binding.updated_at) == ("quota", NOW)
    with CaptureQueriesContext(connection) as queries:  # steady: nothing written
        cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW + timedelta(minutes=5))
    binding.refresh_from_db()
    assert (binding.level, binding.updated_at) == ("quota", NOW)
    table = ReservationBinding._meta.db_table
    assert [q["sql"] for q in queries if table in q["sql"]
            and q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))] == []
    ReservationBinding.objects.filter(pk=binding.pk).update(why="another plan's")
    cluster_reconcile(cluster=memory.cluster, reason="test", at=NOW + timedelta(minutes=10))
    binding.refresh_from_db()
    assert (binding.why != "another plan's", binding.updated_at) == \
        (True, NOW + timedelta(minutes=10))
