"""The freshness bound at its worst (due times leave room for beat's interval and the
sweep's budget), and an outbox that does not churn: a re-mark of a waiting mark writes
no row version, one of a due mark a HOT update, and no re-mark is lost to a sweep."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from gpuquota.core.timeutil import hour_floor
from gpuquota.outbox.checks import freshness_bounds_check
from gpuquota.outbox.conf import (
    dirty_sweep_budget_s,
    dirty_sweep_interval_s,
    rollup_final_delay_s,
    rollup_freshness_s,
)
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.outbox.services import gpu_hours_mark_dirty
from gpuquota.usage import sweep
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.services import gpu_hour_recompute
from gpuquota.usage.sweep import dirty_hours_process
from gpuquota.usage.tasks import dirty_sweep
from tests.factories import make_gpu
from tests.usage.factories import T0, add_samples, minute_samples

pytestmark = pytest.mark.django_db
S, M, H = timedelta(seconds=1), timedelta(minutes=1), timedelta(hours=1)
TABLE = DirtyGpuHour._meta.db_table


def slack() -> timedelta:
    """What a mark waits at worst past its due time: up to one beat interval for the next
    sweep, then that sweep's budget."""
    return (dirty_sweep_interval_s() + dirty_sweep_budget_s()) * S


def due_at(gpu, hour=T0):
    return DirtyGpuHour.objects.get(gpu=gpu, hour=hour).due_at


def test_defaults_leave_a_sweep_interval_and_a_budget_inside_each_bound():
    assert (rollup_freshness_s(), rollup_final_delay_s()) == (300, 60)
    assert (dirty_sweep_interval_s(), dirty_sweep_budget_s()) == (15, 15)


@pytest.mark.parametrize("offset", [0 * S, 7 * S, 10 * M, 54 * M + 59 * S, 57 * M, 59 * M + 59 * S])
def test_an_open_hours_due_time_plus_a_sweep_is_within_the_freshness_interval(
        time_machine, offset):
    gpu = make_gpu()
    now = T0 + offset
    time_machine.move_to(now, tick=False)
    minute_samples(gpu, T0, 1)
    due = due_at(gpu)
    assert now <= due and due + slack() <= now + rollup_freshness_s() * S
    # and, as the hour closes, within the final delay of its end
    assert due + slack() <= T0 + H + rollup_final_delay_s() * S


@pytest.mark.parametrize("offset", [0 * S, 1 * S, 29 * S, 30 * S, 31 * S, 59 * S, 5 * M])
def test_a_closed_hours_due_time_plus_a_sweep_is_within_the_final_delay_of_the_sample(
        time_machine, offset):
    gpu = make_gpu()
    now = T0 + H + offset  # the hour's last window (or a later one) arrives
    time_machine.move_to(now, tick=False)
    minute_samples(gpu, T0 + 59 * M, 1)
    due = due_at(gpu)
    assert now <= due and due + slack() <= now + rollup_final_delay_s() * S


def test_freshness_settings_move_the_due_time_with_the_sweep_settings(time_machine):
    gpu = make_gpu()
    time_machine.move_to(T0 + 10 * M, tick=False)
    with override_settings(USAGE_ROLLUP_FRESHNESS_S=120, USAGE_DIRTY_SWEEP_INTERVAL_S=10,
                           USAGE_DIRTY_SWEEP_BUDGET_S=20):
        minute_samples(gpu, T0, 1)
    assert due_at(gpu) == T0 + 10 * M + 90 * S


def test_a_bound_shorter_than_an_interval_and_a_budget_is_a_system_check_warning():
    assert freshness_bounds_check() == []
    with override_settings(USAGE_ROLLUP_FINAL_DELAY_S=20):
        assert [w.id for w in freshness_bounds_check()] == ["outbox.W002"]
    with override_settings(USAGE_ROLLUP_FRESHNESS_S=45, USAGE_DIRTY_SWEEP_BUDGET_S=50):
        assert [w.id for w in freshness_bounds_check()] == ["outbox.W001", "outbox.W002"]


def test_beat_sweeps_roll_up_every_sample_within_the_bounds_less_the_budget(time_machine):
    """Sweeps every beat interval, a batch a minute off the sweeps' phase: the worst wait
    from a sample's arrival to the sweep whose rows count it leaves the sweep its budget
    inside the freshness interval, and inside the final delay once the hour is closed."""
    gpu = make_gpu()
    interval, budget = dirty_sweep_interval_s() * S, dirty_sweep_budget_s() * S
    arrivals = [T0 + (minute + 1) * M + 7 * S for minute in range(60)]  # window, then 7 s
    waits, closed_waits, stored = [], [], 0
    at = T0
    while at <= T0 + H + 2 * M:
        time_machine.move_to(at, tick=False)
        while stored < len(arrivals) and arrivals[stored] <= at:
            minute_samples(gpu, T0 + stored * M, 1)
            stored += 1
        dirty_sweep()
        counted = sum(r.covered_s for r in GpuHourUsage.objects.filter(gpu=gpu)) // 60
        for index in range(len(waits), counted):
            waits.append(at - arrivals[index])
            if arrivals[index] >= T0 + H:
                closed_waits.append(at - arrivals[index])
        at += interval
    assert len(waits) == 60 and closed_waits
    assert max(waits) + budget <= rollup_freshness_s() * S
    assert max(closed_waits) + budget <= rollup_final_delay_s() * S
    assert max(waits) > rollup_freshness_s() * S - slack()  # a real worst case, not luck


def _row_version(gpu, hour) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT ctid::text, generation FROM {TABLE} WHERE gpu_id = %s "
                       "AND hour = %s", [gpu.id, hour])
        return cursor.fetchone()


def _updates() -> tuple[int, int]:
    """This transaction's updates of the outbox table: (all, HOT)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
                       "WHERE relid = %s::regclass", [TABLE])
        return cursor.fetchone()


@pytest.mark.postgres
def test_re_marking_a_waiting_mark_writes_no_row_version(time_machine):
    gpu = make_gpu()
    time_machine.move_to(T0 + 10 * M, tick=False)
    minute_samples(gpu, T0 + 9 * M, 1)
    first, updates = _row_version(gpu, T0), _updates()
    for minute in range(10, 14):  # the next batches of the open hour, before it is due
        time_machine.move_to(T0 + (minute + 1) * M, tick=False)
        minute_samples(gpu, T0 + minute * M, 1)
    assert _row_version(gpu, T0) == first and _updates() == updates
    assert DirtyGpuHour.objects.get(gpu=gpu).marked_at == T0 + 10 * M  # the oldest change


@pytest.mark.postgres
def test_re_marking_a_due_mark_bumps_its_generation_as_a_hot_update(time_machine):
    gpu = make_gpu()
    time_machine.move_to(T0 + 2 * H, tick=False)
    minute_samples(gpu, T0, 1)  # a closed hour: due at once, a sweep may be reading it
    (_, generation), (updates, hot) = _row_version(gpu, T0), _updates()
    gpu_hours_mark_dirty(marks=[(gpu.id, T0)])
    assert _row_version(gpu, T0)[1] == generation + 1
    assert _updates() == (updates + 1, hot + 1)


def test_an_earlier_due_time_moves_the_mark(time_machine):
    gpu = make_gpu()
    time_machine.move_to(T0 + 10 * M, tick=False)
    minute_samples(gpu, T0, 1)
    with override_settings(USAGE_ROLLUP_FRESHNESS_S=60):
        minute_samples(gpu, T0 + M, 1)
    assert due_at(gpu) == T0 + 10 * M + 30 * S  # 60 s less the slack of 30 s


def _exact(gpu, hour, covered_s: int) -> None:
    swept = sorted(GpuHourUsage.objects.filter(gpu=gpu, hour=hour)
                   .values_list("kind", "covered_s", "busy_s"))
    gpu_hour_recompute(gpu_id=gpu.id, hour=hour)
    assert swept == sorted(GpuHourUsage.objects.filter(gpu=gpu, hour=hour)
                           .values_list("kind", "covered_s", "busy_s"))
    assert sum(row[1] for row in swept) == covered_s


def test_a_re_mark_between_the_sweeps_read_and_its_take_is_not_lost(monkeypatch):
    gpu = make_gpu()
    minute_samples(gpu, T0, 1)  # a closed hour, due at once
    real = sweep.gpu_hours_try_lock

    def batch_meanwhile(*, gpu_ids, hour):  # the sweep has read the mark's generation
        monkeypatch.setattr(sweep, "gpu_hours_try_lock", real)
        add_samples(gpu, [{"start": T0 + 5 * M}])
        return real(gpu_ids=gpu_ids, hour=hour)

    monkeypatch.setattr(sweep, "gpu_hours_try_lock", batch_meanwhile)
    assert dirty_hours_process() == 1
    assert DirtyGpuHour.objects.filter(gpu=gpu, hour=T0).exists()  # left for the next
    dirty_sweep()
    assert not DirtyGpuHour.objects.exists()
    _exact(gpu, T0, 120)


def _blocked_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _wait_until(predicate, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_a_batch_marking_while_the_sweep_recomputes_its_hour_is_not_lost(
        transactional_db, monkeypatch):
    """The batch's mark waits for the sweep's transaction, then is a new mark."""
    gpu, hour = make_gpu(), hour_floor(timezone.now())
    minute_samples(gpu, hour, 1)
    batch: dict = {}

    def store_batch():
        batch["pid"] = _backend_pid()
        try:
            add_samples(gpu, [{"start": hour + 5 * M}])
        finally:
            connection.close()

    real = sweep.gpu_hours_replace

    def recompute_with_a_batch_arriving(**kwargs):
        thread = threading.Thread(target=store_batch)
        thread.start()
        _wait_until(lambda: "pid" in batch and _blocked_on_a_lock(batch["pid"]))
        batch["thread"] = thread
        return real(**kwargs)

    monkeypatch.setattr(sweep, "gpu_hours_replace", recompute_with_a_batch_arriving)
    assert dirty_hours_process() == 1  # a catch-up: takes the mark before it is due
    batch["thread"].join(timeout=30)
    monkeypatch.setattr(sweep, "gpu_hours_replace", real)
    assert GpuHourUsage.objects.get(gpu=gpu, hour=hour).covered_s == 60  # without it
    assert DirtyGpuHour.objects.filter(gpu=gpu, hour=hour).exists()
    assert dirty_hours_process() == 1
    _exact(gpu, hour, 120)


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_a_batch_re_marking_a_waiting_mark_as_the_sweep_takes_it_is_swept(transactional_db):
    """The re-mark writes nothing but holds the mark's row lock until its batch commits:
    the sweep's take waits for it, then reads the batch."""
    gpu, hour = make_gpu(), hour_floor(timezone.now())
    minute_samples(gpu, hour, 1)
    assert due_at(gpu, hour) > timezone.now()  # waiting
    marked, sweeper = threading.Event(), {}

    def store_batch_slowly():
        try:
            with transaction.atomic():
                add_samples(gpu, [{"start": hour + 5 * M}])
                marked.set()
                _wait_until(lambda: "pid" in sweeper and _blocked_on_a_lock(sweeper["pid"]))
        finally:
            connection.close()

    thread = threading.Thread(target=store_batch_slowly)
    thread.start()
    assert marked.wait(timeout=30)
    sweeper["pid"] = _backend_pid()
    assert dirty_hours_process() == 1  # a catch-up, blocked until the batch commits
    thread.join(timeout=30)
    assert not DirtyGpuHour.objects.exists()
    _exact(gpu, hour, 120)
