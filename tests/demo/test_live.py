"""`manage.py demo` as `make demo` runs it, on the embedded default (SQLite in a folder of
its own, no broker): the web server answers, the simulated agents' samples land, the
in-process beat rolls them up, and a Ctrl-C or a TERM to its whole process group stops it
with every child it started, the agents before the web server; a second Ctrl-C while it
stops kills them at once, never leaving one behind."""

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from tests.helpers import free_port

ROOT = Path(settings.BASE_DIR)


def _manage(env: dict, *args: str) -> None:
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def _count(database: Path, table: str) -> int:
    with sqlite3.connect(database, timeout=10) as db:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def _wait_for(predicate, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; demo log:\n{log.read_text()[-3000:]}")


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.append(pid)
    return alive


def _env(var_dir: Path) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "REDIS_URL")}
    env.update(GPUQUOTA_VAR_DIR=str(var_dir), EMAIL_URL=f"file://{var_dir / 'mail'}",
               GPUQUOTA_SETTLEMENT_DELAY_HOURS="0", USAGE_ROLLUP_FRESHNESS_S="1",
               PYTHONUNBUFFERED="1")
    return env


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    """`make demo`'s database as `migrate` and `seed_demo` leave it, made once: each run
    starts from a copy of it."""
    var_dir = tmp_path_factory.mktemp("seeded")
    env = _env(var_dir)
    _manage(env, "migrate", "--noinput", "-v0")
    _manage(env, "seed_demo", "--history-hours", "0")
    return var_dir / "gpuquota.sqlite3"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("stop_signals", [
    (signal.SIGINT,), (signal.SIGTERM,), (signal.SIGINT, signal.SIGINT)],
    ids=["ctrl-c", "term", "ctrl-c-twice"])
def test_the_demo_serves_ingests_rolls_up_and_stops_with_its_children(tmp_path, seeded,
                                                                       stop_signals):
    env = _env(tmp_path)
    database, log = tmp_path / "gpuquota.sqlite3", tmp_path / "demo.log"
    shutil.copyfile(seeded, database)
    seeded = _count(database, "ingest_sample"), _count(database, "usage_gpuhourusage")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as out:
        demo = subprocess.Popen(
            [sys.executable, "manage.py", "demo", "--addr", f"127.0.0.1:{port}",
             "--window", "5", "--beat-cap", "3"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    children: list[int] = []
    try:
        _wait_for(lambda: f"gpuquota demo is running at {url}/" in log.read_text(), 90,
                  "the banner", log)
        for path in ("/healthz", "/accounts/login/"):
            with urllib.request.urlopen(url + path, timeout=10) as response:
                assert response.status == 200, path
        _wait_for(lambda: _count(database, "ingest_sample") > seeded[0], 60,
                  "the agents' samples", log)
        _wait_for(lambda: _count(database, "usage_gpuhourusage") > seeded[1], 60,
                  "the in-process beat's rollups", log)
        # the reliability figures are computed on SQLite too (their runs query was once
        # PostgreSQL's own SQL: the beat retried it for ever)
        _wait_for(lambda: _count(database, "reliability_figuressnapshot") > 0, 60,
                  "the reliability figures", log)
        assert "beat reliability-figures: Retry" not in log.read_text()

        children = _children(demo.pid)
        assert len(children) == 13  # the web server and one agent per demo node
        before_stop = len(log.read_text())
        for stop_signal in stop_signals:  # as a terminal's Ctrl-C does, or `timeout`
            os.killpg(demo.pid, stop_signal)
            time.sleep(0.3)  # an impatient user presses Ctrl-C again while it stops
        assert demo.wait(timeout=60) is not None
        _wait_for(lambda: not _alive(children), 30, "the agents and the web server to stop",
                  log)
        stopping = log.read_text()[before_stop:]
        assert "Traceback" not in stopping and "KeyboardInterrupt" not in stopping
        if len(stop_signals) == 1:
            # the agents stop first: their last batches reach the server still up
            assert "event=send_failed" not in stopping
        else:
            assert "Stopping at once" in stopping
    finally:
        for pid in [demo.pid, *_alive(children)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
