"""End to end with the real pieces: simulated agent → API → outbox → Celery worker
(on its own Redis, which is stopped and restarted mid-stream) → rollups."""

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlparse

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from gpuquota.core.timeutil import hour_floor
from gpuquota.ingest.models import Sample
from gpuquota.ingest.services import cluster_ensure, node_enrol
from gpuquota.inventory.models import Gpu
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.rollup import usage_buckets, usage_inputs_load
from tests.factories import AdminFactory, TeamFactory
from tests.helpers import celery_worker, free_port
from tests.usage.factories import reserve

ROOT = Path(settings.BASE_DIR)


def _redis(port: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["redis-cli", "-p", str(port), *args],
                          capture_output=True, text=True, timeout=10)


def redis_start(port: int) -> None:
    """Our own Redis on `port` (the shared one is never stopped)."""
    subprocess.run(["redis-server", "--port", str(port), "--save", "", "--appendonly",
                    "no", "--daemonize", "yes"], check=True, timeout=10)
    for _ in range(50):
        if _redis(port, "ping").stdout.strip() == "PONG":
            return
        time.sleep(0.1)
    raise RuntimeError("our redis-server did not start")


def redis_stop(port: int) -> None:
    _redis(port, "shutdown", "nosave")
    for _ in range(50):
        if _redis(port, "ping").returncode != 0:
            return
        time.sleep(0.1)


def agent_once(server: str, token_file: Path, spool: Path) -> None:
    """One window of 2 simulated GPUs (10 s windows), sent to the live server."""
    result = subprocess.run(
        [sys.executable, "-m", "agent", "--simulate", "2", "--once", "--server", server,
         "--token-file", str(token_file), "--window", "10", "--poll", "1", "--send-jitter", "0",
         "--hostname", "e2e-node", "--spool-dir", str(spool), "--simulate-profiles",
         "training,inference"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def rollups_complete() -> bool:
    """No outbox left, and every GPU-hour with samples has exactly the rows computed now."""
    if DirtyGpuHour.objects.exists():
        return False
    for gpu in Gpu.objects.filter(parent__isnull=True):
        hours = {hour_floor(ws) for ws in Sample.objects.filter(gpu=gpu)
                 .values_list("window_start", flat=True)}
        for hour in hours:
            inputs = usage_inputs_load(gpu_ids=[gpu.id], start=hour,
                                       end=hour + timedelta(hours=1))
            expected = sorted((k.kind, k.assignment_id, b.covered_s, b.busy_s)
                              for k, b in usage_buckets(inputs=inputs, gpu_id=gpu.id).items())
            stored = sorted(GpuHourUsage.objects.filter(gpu=gpu, hour=hour).values_list(
                "kind", "assignment_id", "covered_s", "busy_s"))
            if expected != stored:
                return False
    return True


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(300)
def test_agent_to_rollups_through_a_real_worker_surviving_a_redis_restart(
    transactional_db, live_server, tmp_path, settings
):
    settings.USAGE_ROLLUP_FRESHNESS_S = 1  # the live server marks: open hours due at once
    db = connection.settings_dict
    database_url = (f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
                    f"/{db['NAME']}")
    assert urlparse(database_url).path.startswith("/test_")
    issued = node_enrol(cluster=cluster_ensure(name="e2e"), hostname="e2e-node",
                        actor=AdminFactory())
    token_file = tmp_path / "token"
    token_file.write_text(issued.key)
    token_file.chmod(0o600)
    spool = tmp_path / "spool"

    redis_port = free_port()
    redis_start(redis_port)
    env = {**os.environ, "DATABASE_URL": database_url,
           "REDIS_URL": f"redis://127.0.0.1:{redis_port}/6", "USAGE_DIRTY_SWEEP_INTERVAL_S": "1",
           "USAGE_ROLLUP_FRESHNESS_S": "1"}
    try:
        with celery_worker(env=env, log_path=tmp_path / "worker.log", options=(
                "-B", "--concurrency", "2", "-s", str(tmp_path / "beat-schedule"))):
            agent_once(live_server.url, token_file, spool)  # registers the GPUs
            gpu = (Gpu.objects.filter(node=issued.node, parent__isnull=True)
                   .order_by("index").first())
            team = TeamFactory(slug="vision")
            now = timezone.now().replace(microsecond=0)
            assignment = reserve(team, gpu, now - timedelta(minutes=5), now + timedelta(hours=2))
            agent_once(live_server.url, token_file, spool)
            wait_for(rollups_complete, 60, "the worker to roll up the first windows")
            reserved = GpuHourUsage.objects.filter(assignment=assignment)
            assert reserved.exists() and {r.team_id for r in reserved} == {team.id}
            assert not GpuHourUsage.objects.filter(gpu=gpu, kind="unreserved").exists()

            redis_stop(redis_port)  # mid-stream: the API keeps storing, the outbox keeps the work
            agent_once(live_server.url, token_file, spool)
            agent_once(live_server.url, token_file, spool)
            assert DirtyGpuHour.objects.exists()
            redis_start(redis_port)
            wait_for(rollups_complete, 90, "the worker to catch up after Redis came back")
            covered = sum(r.covered_s for r in GpuHourUsage.objects.filter(assignment=assignment))
            sampled = Sample.objects.filter(gpu=gpu, window_start__gte=assignment.assigned_from)
            assert covered == sum(int((s.window_end - s.window_start).total_seconds())
                                  for s in sampled)
    finally:
        redis_stop(redis_port)
