"""Jobs that failed on a GPU with no hardware event behind them: counted against the class's
rate of failed jobs per job-day (the users' own failures, which every GPU sees, explain
nothing), combined with the hardware incidents by Fisher's method."""

import math
from datetime import UTC, datetime, timedelta

import pytest

from gpuquota.reliability.history import fleet_history
from gpuquota.reliability.jobruns import Busy
from gpuquota.reliability.lemons import lemons, lemons_from
from gpuquota.reliability.stats import fisher_p
from tests.reliability.factories import fleet_build, jobs_run

AS_OF = datetime(2026, 6, 1, tzinfo=UTC)
START = AS_OF - timedelta(days=119)


def test_fisher_combination():
    assert fisher_p([0.3]) == 0.3 and fisher_p([1.0, 1.0]) == 1.0
    # chi-square with 4 degrees of freedom at -2 ln(0.05 * 0.05) = 11.98: 0.0175
    assert round(fisher_p([0.05, 0.05]), 4) == 0.0175
    q = 1e-3 * 0.2
    assert math.isclose(fisher_p([1e-3, 0.2]), q * (1 - math.log(q)))
    assert fisher_p([1e-3, 0.5]) > 1e-3  # an unremarkable second test costs some evidence
    assert fisher_p([1e-3, 0.01]) < 1e-3 and fisher_p([0.0, 0.5]) == 0.0


def test_job_days_of_overlapping_runs():
    day = 86400.0
    busy = Busy([(0, 2 * day), (day, 3 * day), (5 * day, 6 * day)])
    start = datetime.fromtimestamp(0, tz=UTC)
    assert busy.days(start, start + timedelta(days=10)) == 5
    assert busy.days(start + timedelta(hours=36), start + timedelta(days=5, hours=12)) == 2.5


@pytest.fixture
def fleet(db):
    return fleet_build(as_of=AS_OF)


def _users_fail(i: int, n: int) -> bool:
    """About one job in ten fails for its user's reasons on every GPU; GPU 3's users fail a
    little more often (16 of 119 against 12: bad luck, not a bad GPU)."""
    return (n + i) % 10 == 0 or (i == 3 and n % 30 == 1)


def test_users_failed_jobs_on_healthy_gpus_flag_no_one(fleet):
    jobs_run(fleet["gpus"], start=START, days=119, failed=_users_fail)
    flags = lemons(as_of=AS_OF)
    assert [f.key for f in flags] == [fleet["lemon"].uuid]  # the XID lemon only
    (flag,) = flags
    assert flag.jobs_failed == 12 and 11 < flag.jobs_expected < 13.5
    assert any(line.startswith("12 of its jobs failed (FAILED or NODE_FAIL) with no hardware")
               for line in flag.evidence)
    assert [f.key for f in lemons(as_of=AS_OF, kind="node")] == [
        f"{fleet['lemon'].node.cluster.slug}/n01"]


def test_a_gpu_killing_jobs_silently_is_flagged_and_replays(fleet):
    killer = fleet["gpus"][13]

    def failed(i: int, n: int) -> bool:  # GPU 13 also kills one job in four, no XID
        return _users_fail(i, n) or (i == 13 and n >= 40 and n % 4 == 0)

    jobs_run(fleet["gpus"], start=START, days=119, failed=failed)
    flag = next(f for f in lemons(as_of=AS_OF) if f.key == killer.uuid)
    assert (flag.failures, flag.warnings, flag.expected > 0) == (0, 0, True)
    assert flag.jobs_failed == 32 and flag.p_value < 0.5 / 20
    assert any(line.startswith("32 of its jobs failed") for line in flag.evidence)
    # the job signal switched off, nothing points at it
    history = fleet_history(as_of=AS_OF, since=AS_OF - timedelta(days=360))
    assert killer.uuid not in {f.key for f in lemons_from(history, kind="gpu", jobs=False)}
    # replayed: not flagged a second before its first flag, flagged since then
    first = flag.first_flagged
    assert killer.uuid not in {f.key for f in lemons(as_of=first - timedelta(seconds=1))}
    again = next(f for f in lemons(as_of=first) if f.key == killer.uuid)
    assert again.first_flagged == first
    node = next(f for f in lemons(as_of=AS_OF, kind="node") if f.key.endswith("/n03"))
    assert node.jobs_failed == 12 + 32 + 12 + 12  # its four GPUs' one-GPU jobs


def test_the_embedded_defaults_runs_are_postgresqls(fleet):
    """The portable read of the runs (SQLite, the demo) gives the PostgreSQL query's rows."""
    from django.db import connection

    from gpuquota.inventory.models import Gpu
    from gpuquota.reliability.jobruns import _RUNS_SQL, _runs_rows_portable
    from gpuquota.schedulers.models import SlurmJob, SlurmJobGpu

    jobs_run(fleet["gpus"], start=START, days=30, failed=_users_fail)
    sql = _RUNS_SQL.format(held=SlurmJobGpu._meta.db_table, job=SlurmJob._meta.db_table,
                           gpu=Gpu._meta.db_table)
    for since, as_of in ((None, AS_OF), (START + timedelta(days=10), START + timedelta(days=20))):
        with connection.cursor() as cursor:
            cursor.execute(sql, {"as_of": as_of, "since": since})
            expected = sorted(cursor.fetchall())
        assert expected and sorted(_runs_rows_portable(since=since, as_of=as_of)) == expected
