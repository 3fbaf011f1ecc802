"""The set-based, coalescing sweep: an open hour recomputed once per freshness interval,
a closed one final at once, late data again; the same rows whatever the batching, the
order, or the number of workers."""

import os
import subprocess
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings
from django.db import connection, transaction

from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.usage import sweep
from gpuquota.usage.models import GpuDayUsage, GpuHourUsage
from gpuquota.usage.services import gpu_hour_recompute, gpu_hours_try_lock
from gpuquota.usage.sweep import dirty_hours_process
from gpuquota.usage.tasks import dirty_sweep
from tests.factories import NodeFactory, TeamFactory, make_gpu
from tests.usage.factories import T0, add_processes, add_samples, minute_samples, reserve
from tests.usage.oracle_days import assert_day_rows_are_the_hours_summed

pytestmark = pytest.mark.django_db
M, H = timedelta(minutes=1), timedelta(hours=1)
FIELDS = ("hour", "gpu_class_id", "kind", "assignment_id", "team_id", "split_ways", "failed",
          "rate_card_id", "covered_s", "busy_s", "util_weighted", "energy_j",
          "memory_used_bytes_max", "process_count", "users_seen")


def rows(gpu) -> list[tuple]:
    return sorted(GpuHourUsage.objects.filter(gpu=gpu).values_list(*FIELDS), key=repr)


@pytest.fixture
def recomputes(monkeypatch):
    """How many GPU-hours the sweep recomputed."""
    calls = []
    real = sweep.gpu_hours_replace

    def counted(*, gpu_ids, hour, hours=1, fleet=None):
        calls.extend((gpu_id, hour + i * H) for i in range(hours) for gpu_id in gpu_ids)
        return real(gpu_ids=gpu_ids, hour=hour, hours=hours, fleet=fleet)

    monkeypatch.setattr(sweep, "gpu_hours_replace", counted)
    return calls


def test_a_burst_of_batches_in_an_open_hour_is_recomputed_once_per_interval(
        time_machine, recomputes):
    gpu = make_gpu()
    time_machine.move_to(T0 + 10 * M, tick=False)
    for minute in range(10):  # one batch a minute, a sweep after each (beat: every 15 s)
        time_machine.move_to(T0 + (10 + minute) * M + 5 * timedelta(seconds=1), tick=False)
        minute_samples(gpu, T0 + (9 + minute) * M, 1)
        dirty_sweep()
    # first mark at 10:05 → due 14:35 (5 min less a beat interval and a sweep budget),
    # taken by the sweep after 15:05's batch: the batches until then cost one recompute
    assert recomputes == [(gpu.id, T0)]
    assert {r.covered_s for r in GpuHourUsage.objects.filter(gpu=gpu)} == {6 * 60}


def test_a_closed_hour_is_final_within_a_minute_and_late_data_is_recomputed(
        time_machine, recomputes):
    gpu = make_gpu()
    time_machine.move_to(T0 + 59 * M + timedelta(seconds=5), tick=False)
    minute_samples(gpu, T0 + 58 * M, 1)
    time_machine.move_to(T0 + H + timedelta(seconds=5), tick=False)
    minute_samples(gpu, T0 + 59 * M, 1)  # the hour's last window, just after it closed
    dirty_sweep()
    assert recomputes == []  # not before the final delay
    time_machine.move_to(T0 + H + timedelta(seconds=61), tick=False)
    dirty_sweep()
    assert recomputes == [(gpu.id, T0)]
    assert GpuHourUsage.objects.get(gpu=gpu).covered_s == 120

    time_machine.move_to(T0 + 3 * H, tick=False)
    add_samples(gpu, [{"start": T0 + 10 * M, "util": 90}])  # late, from a spool
    assert DirtyGpuHour.objects.get(gpu=gpu).due_at == T0 + 3 * H  # due at once
    dirty_sweep()
    assert len(recomputes) == 2
    swept = rows(gpu)
    gpu_hour_recompute(gpu_id=gpu.id, hour=T0)
    assert swept == rows(gpu) and swept[0][FIELDS.index("covered_s")] == 180


def _feed(gpu, order: list[int], batch: int) -> None:
    for offset in range(0, len(order), batch):
        add_samples(gpu, [{"start": T0 + i * M, "util": 3 + i % 97, "energy_j": 100.0 + i,
                           "memory_used_bytes_max": 1000 * i} for i in order[offset:
                                                                          offset + batch]])
        dirty_hours_process()


def test_one_batch_many_batches_and_out_of_order_give_identical_rows():
    node, team = NodeFactory(), TeamFactory()
    gpus = [make_gpu(node=node, index=i) for i in range(3)]
    for gpu in gpus:
        add_processes(gpu, T0 + 30 * M, 60, user="alice")
        reserve(team, gpu, T0 + 70 * M, T0 + 100 * M)
    minutes = list(range(150))
    _feed(gpus[0], minutes, 150)
    _feed(gpus[1], minutes, 7)
    _feed(gpus[2], [m for m in reversed(minutes) if m % 2] + [m for m in minutes if not m % 2],
          11)
    assert not DirtyGpuHour.objects.exists()

    def without_assignment(gpu):  # each GPU has its own assignment
        drop = FIELDS.index("assignment_id")
        return [r[:drop] + r[drop + 1:] for r in rows(gpu)]

    assert len(rows(gpus[0])) >= 4
    assert without_assignment(gpus[0]) == without_assignment(gpus[1]) \
        == without_assignment(gpus[2])


def _worker(name: str, env: dict, log: Path) -> subprocess.Popen:
    root = Path(settings.BASE_DIR)
    return subprocess.Popen(
        [str(root / ".venv/bin/celery"), "-A", "gpuquota", "worker", "--concurrency", "1",
         "-n", f"{name}@%h", "--loglevel", "INFO", "--without-gossip", "--without-mingle"],
        cwd=root, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(300)
def test_two_real_workers_sweeping_one_outbox_give_the_rows_of_one(transactional_db,
                                                                   tmp_path):
    gpus = [make_gpu(index=i) for i in range(6)]
    for i, gpu in enumerate(gpus):
        minute_samples(gpu, T0, 240, util=10 + i)
        add_processes(gpu, T0, 240, user="alice")
    assert DirtyGpuHour.objects.count() == 24
    db = connection.settings_dict
    redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/9"
    env = {**os.environ, "REDIS_URL": redis_url, "USAGE_DIRTY_SWEEP_BATCH": "2",
           "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:"
                           f"{db['PORT'] or 5432}/{db['NAME']}"}
    broker = Celery("sweep-test", broker=redis_url, set_as_current=False)  # tasks stay ours
    broker.connection_for_write().default_channel.client.flushdb()
    workers = [_worker(name, env, tmp_path / f"{name}.log") for name in ("w1", "w2")]
    try:
        deadline = time.monotonic() + 200
        while DirtyGpuHour.objects.exists():
            assert time.monotonic() < deadline, "the workers did not empty the outbox"
            assert all(w.poll() is None for w in workers)
            for _ in range(4):
                broker.send_task("usage.dirty_sweep")
            time.sleep(2)
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(timeout=30)
    by_workers = sorted(GpuHourUsage.objects.values_list("gpu_id", *FIELDS), key=repr)
    logs = [(tmp_path / f"{name}.log").read_text() for name in ("w1", "w2")]
    assert all("usage.dirty_sweep" in log and "succeeded" in log for log in logs)
    assert_day_rows_are_the_hours_summed()  # two workers writing hours of one GPU-day
    GpuDayUsage.objects.all().delete()
    GpuHourUsage.objects.all().delete()
    for gpu in gpus:
        for hour in range(4):
            gpu_hour_recompute(gpu_id=gpu.id, hour=T0 + hour * H)
    assert len(by_workers) == 24
    assert by_workers == sorted(GpuHourUsage.objects.values_list("gpu_id", *FIELDS), key=repr)


@pytest.mark.postgres
def test_a_worker_on_one_hour_of_a_gpu_leaves_its_other_hours_to_another(transactional_db):
    gpu = make_gpu()
    minute_samples(gpu, T0, 120)
    held, release = threading.Event(), threading.Event()

    def other_worker():  # holds the GPU's first hour, as a sweep in progress does
        try:
            with transaction.atomic():
                assert gpu_hours_try_lock(gpu_ids=[gpu.id], hour=T0) == {gpu.id}
                held.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=other_worker)
    thread.start()
    try:
        assert held.wait(30)
        assert dirty_hours_process() == 1  # the second hour, not blocked by the first
        assert set(GpuHourUsage.objects.values_list("hour", flat=True)) == {T0 + H}
        assert list(DirtyGpuHour.objects.values_list("hour", flat=True)) == [T0]
    finally:
        release.set()
        thread.join()
    assert dirty_hours_process() == 1
    assert rows(gpu)[0][FIELDS.index("covered_s")] == 3600 and len(rows(gpu)) == 2


def test_consecutive_hours_of_the_same_gpus_share_one_load_within_the_round_bounds(
        monkeypatch):
    node = NodeFactory()
    gpus = [make_gpu(node=node, index=i) for i in range(2)]
    for gpu in gpus:  # a back-filled stretch: three closed hours, due at once
        minute_samples(gpu, T0, 180, util=40)
        add_processes(gpu, T0 + 20 * M, 120, user="alice")
    spans = []
    real = sweep.gpu_hours_replace

    def recorded(*, gpu_ids, hour, hours=1, fleet=None):
        spans.append((tuple(gpu_ids), hour, hours))
        return real(gpu_ids=gpu_ids, hour=hour, hours=hours, fleet=fleet)

    monkeypatch.setattr(sweep, "gpu_hours_replace", recorded)
    monkeypatch.setattr(sweep, "GPU_HOURS_PER_ROUND", 4)
    assert dirty_hours_process() == 6
    ids = tuple(sorted(gpu.id for gpu in gpus))
    assert spans == [(ids, T0, 2), (ids, T0 + 2 * H, 1)]  # 4 GPU-hours a round at most
    swept = [rows(gpu) for gpu in gpus]
    assert [len(r) for r in swept] == [3, 3]
    for gpu in gpus:  # the rows of a recompute hour by hour: the same, nothing rewritten
        for hour in (T0, T0 + H, T0 + 2 * H):
            gpu_hour_recompute(gpu_id=gpu.id, hour=hour)
    assert [rows(gpu) for gpu in gpus] == swept
