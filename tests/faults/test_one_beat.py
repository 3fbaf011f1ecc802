"""Two Celery beats, real processes on a real broker and PostgreSQL: the second stands by and
sends nothing while the first runs, takes over when the first is killed, and a beat whose
lock was lost to someone else stops (docs/operations.md, "The one beat")."""

import contextlib
import os
import re
import signal
import threading
import time

import psycopg
import pytest

from gpuquota.core.beat_lock import LOCK_KEY
from tests.faults.conftest import database_url
from tests.helpers import project_process

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(240)]
SENT = "Sending due task"


def _wait_for_log(path, pattern: str, timeout_s: float = 90) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        text = path.read_text() if path.exists() else ""
        if re.search(pattern, text):
            return text
        assert time.monotonic() < deadline, f"{path.name}: no {pattern!r} in:\n{text[-3000:]}"
        time.sleep(0.2)


def _lock_holders(conn) -> list[str]:
    return [row[0] for row in conn.execute(
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM "
        "pg_database WHERE datname = current_database()) "
        "AND ((l.classid::bigint << 32) | l.objid::bigint) = %s", [LOCK_KEY])]


def test_a_second_beat_stands_by_takes_over_and_a_lost_lock_stops_a_beat(own_redis, tmp_path):
    env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": own_redis.url,
           "GPUQUOTA_BEAT_LOCK_CHECK_S": "1", "USAGE_DIRTY_SWEEP_INTERVAL_S": "1",
           "LOG_LEVEL": "INFO", "GPUQUOTA_MAIL_ENABLED": "0"}

    def beat(name: str):
        return project_process(["celery", "-A", "gpuquota", "beat", "--loglevel", "INFO",
                                "--schedule", str(tmp_path / f"schedule-{name}")],
                               env=env, log_path=tmp_path / f"{name}.log")

    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    with contextlib.ExitStack() as stack:
        db = stack.enter_context(psycopg.connect(database_url(), autocommit=True))
        first = stack.enter_context(beat("first"))
        _wait_for_log(first_log, r"beat lock: taken")
        _wait_for_log(first_log, SENT)
        second = stack.enter_context(beat("second"))
        text = _wait_for_log(second_log, r"standing by, sending nothing")
        assert f"pid {first.pid}" in text  # it says who runs
        time.sleep(3)  # first sends every second meanwhile; second nothing
        assert SENT not in second_log.read_text()
        assert _lock_holders(db) == [f"gpuquota-beat {os.uname().nodename} pid {first.pid}"]

        os.killpg(first.pid, signal.SIGKILL)  # the beat's host dies
        first.wait(timeout=60)
        _wait_for_log(second_log, r"beat lock: taken", timeout_s=60)
        _wait_for_log(second_log, SENT, timeout_s=60)

        # Second's lock session is cut (a PostgreSQL restart, a network cut) and another
        # session takes the lock before second can: second must stop, not run unlocked. The
        # other session waits for the lock first, so PostgreSQL hands it over at the cut.
        other = stack.enter_context(psycopg.connect(database_url(), autocommit=True))
        taker = threading.Thread(target=other.execute,
                                 args=("SELECT pg_advisory_lock(%s)", [LOCK_KEY]))
        taker.start()
        deadline = time.monotonic() + 30
        while not db.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND "
                             "NOT granted").fetchone()[0]:
            assert time.monotonic() < deadline, "the other session never queued"
            time.sleep(0.1)
        db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                   "WHERE application_name = %s", [f"gpuquota-beat {os.uname().nodename} "
                                                   f"pid {second.pid}"])
        taker.join(timeout=30)
        assert not taker.is_alive()
        second.wait(timeout=60)
        assert "beat lock: lost to" in second_log.read_text()
