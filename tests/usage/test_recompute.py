"""Every change that alters past usage marks the GPU-hours dirty; the sweep recomputes."""

from datetime import timedelta

import pytest
from django.db import transaction

from accounts.models import ClusterIdentity, Membership
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.outbox.services import (
    gpu_hours_mark_dirty,
    identity_change_mark_dirty,
    membership_change_mark_dirty,
)
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import reservation_create, reservation_release
from gpuquota.usage.models import GpuDayUsage, GpuHourUsage
from gpuquota.usage.services import gpu_hour_recompute
from gpuquota.usage.sweep import dirty_hours_process
from gpuquota.usage.tasks import dirty_sweep
from tests.factories import AdminFactory, TeamFactory, make_gpu
from tests.helpers import run_concurrently
from tests.usage.factories import (
    T0,
    add_processes,
    add_samples,
    minute_samples,
    reserve,
    team_with_user,
)
from tests.usage.oracle_days import assert_day_rows_are_the_hours_summed

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)


def by_team(gpu, hour=T0):
    return {(r.kind, r.team_id): r.busy_s for r in GpuHourUsage.objects.filter(gpu=gpu, hour=hour)}


def test_late_sample_is_recomputed():
    gpu = make_gpu()
    minute_samples(gpu, T0, 30)
    dirty_sweep()
    assert by_team(gpu) == {("unreserved", None): 1800}
    add_samples(gpu, [{"start": T0 + timedelta(minutes=45)}])
    assert DirtyGpuHour.objects.filter(gpu=gpu, hour=T0).exists()
    dirty_sweep()
    assert by_team(gpu) == {("unreserved", None): 1860}
    assert not DirtyGpuHour.objects.exists()


def test_a_mark_during_recompute_leaves_a_row_for_the_next_sweep(monkeypatch):
    from gpuquota.usage import sweep

    gpu = make_gpu()
    minute_samples(gpu, T0, 1)
    real = sweep.gpu_hours_replace

    def ingest_meanwhile(**kwargs):  # a batch stored while the hour is being recomputed
        monkeypatch.setattr(sweep, "gpu_hours_replace", real)
        add_samples(gpu, [{"start": T0 + timedelta(minutes=5)}])
        return real(**kwargs)

    monkeypatch.setattr(sweep, "gpu_hours_replace", ingest_meanwhile)
    assert dirty_hours_process() == 1
    assert DirtyGpuHour.objects.filter(gpu=gpu, hour=T0).exists()
    dirty_sweep()
    assert by_team(gpu) == {("unreserved", None): 120}
    assert not DirtyGpuHour.objects.exists()


def test_generation_guards_the_outbox_row():
    gpu = make_gpu()
    minute_samples(gpu, T0, 1)
    row = DirtyGpuHour.objects.get()
    gpu_hours_mark_dirty(marks=[(gpu.id, T0)])
    row.refresh_from_db()
    assert row.generation == 2
    # what a sweep that read generation 1 does: nothing to delete
    assert DirtyGpuHour.objects.filter(id=row.id, generation=1).delete()[0] == 0


@pytest.mark.postgres
def test_concurrent_sweeps_give_the_same_rows_as_one(transactional_db):
    gpus = [make_gpu(index=i) for i in range(3)]
    for i, gpu in enumerate(gpus):
        minute_samples(gpu, T0, 240, util=10 + i)
        add_processes(gpu, T0, 240, user="alice")

    def sweep():
        while dirty_hours_process(limit=3):
            pass

    errors = [r for r in run_concurrently([sweep] * 4) if isinstance(r, Exception)]
    assert not errors and not DirtyGpuHour.objects.exists()
    concurrent = sorted(GpuHourUsage.objects.values_list("gpu_id", "hour", "covered_s", "busy_s"))
    assert len(concurrent) == 12
    assert_day_rows_are_the_hours_summed()  # four sweeps at once
    GpuDayUsage.objects.all().delete()
    GpuHourUsage.objects.all().delete()
    for gpu in gpus:
        for h in range(4):
            gpu_hour_recompute(gpu_id=gpu.id, hour=T0 + h * H)
    assert sorted(GpuHourUsage.objects.values_list("gpu_id", "hour", "covered_s", "busy_s")) \
        == concurrent


def test_early_release_reattributes_the_rest_of_the_hour():
    gpu = make_gpu()
    admin = AdminFactory()
    team = TeamFactory(slug="vision")
    minute_samples(gpu, T0 + H, 60)
    assignment = reserve(team, gpu, T0, T0 + 3 * H)
    dirty_sweep()
    assert by_team(gpu, T0 + H) == {("reserved", team.id): 3600}
    reservation_release(reservation=assignment.reservation, actor=admin,
                        now=T0 + timedelta(minutes=90))
    dirty_sweep()
    assert by_team(gpu, T0 + H) == {("reserved", team.id): 1800, ("unreserved", None): 1800}


def test_backfilled_reservation_attributes_past_usage():
    gpu = make_gpu()
    admin = AdminFactory()
    team = TeamFactory(slug="vision")
    minute_samples(gpu, T0, 60)
    dirty_sweep()
    assert by_team(gpu) == {("unreserved", None): 3600}
    reservation = reservation_create(team=team, gpu_class=gpu.gpu_class, count=1, start=T0,
                                     end=T0 + H, requested_by=admin, now=T0 + 10 * H)
    assert reservation.is_backfill and reservation.status == Reservation.Status.ENDED
    dirty_sweep()
    assert by_team(gpu) == {("reserved", team.id): 3600}


def test_identity_change_reattributes():
    gpu = make_gpu()
    physics = TeamFactory(slug="physics")
    minute_samples(gpu, T0, 60)
    add_processes(gpu, T0, 60, user="alice", account="phys")
    dirty_sweep()
    assert by_team(gpu) == {("unreserved", None): 3600}
    with transaction.atomic():
        ClusterIdentity.objects.create(cluster=gpu.node.cluster, kind="slurm_account",
                                       key="phys", team=physics, valid_from=T0 - H)
        assert identity_change_mark_dirty(cluster_id=gpu.node.cluster_id, kind="slurm_account",
                                          key="phys", start=T0 - H, end=None) == 1
    dirty_sweep()
    assert by_team(gpu) == {("unreserved", physics.id): 3600}


def test_membership_change_reattributes():
    gpu = make_gpu()
    team_a, user = team_with_user("ta", "alice", gpu.node.cluster)
    team_b = TeamFactory(slug="tb")
    minute_samples(gpu, T0, 60)
    add_processes(gpu, T0, 60, user="alice")
    dirty_sweep()
    assert by_team(gpu) == {("unreserved", team_a.id): 3600}
    switch = T0 + timedelta(minutes=20)
    with transaction.atomic():
        Membership.objects.filter(user=user, team=team_a).update(valid_until=switch)
        Membership.objects.create(user=user, team=team_b, is_billing=True, valid_from=switch)
        membership_change_mark_dirty(user_id=user.id, start=switch, end=None)
    dirty_sweep()
    assert by_team(gpu) == {("unreserved", team_a.id): 1200, ("unreserved", team_b.id): 2400}


def test_tasks_are_named_retried_acks_late_and_run_a_service():
    from django.db import OperationalError

    from gpuquota.celery import collect_beat_schedule
    from gpuquota.usage import tasks

    for task in (tasks.dirty_sweep, tasks.gpu_hour_recompute_task):
        assert task.name.startswith("usage.") and task.acks_late
        assert OperationalError in task.autoretry_for
    assert collect_beat_schedule()["usage-dirty-sweep"]["task"] == "usage.dirty_sweep"
    gpu = make_gpu()
    minute_samples(gpu, T0, 3)
    assert tasks.gpu_hour_recompute_task.apply(args=[gpu.id, T0.isoformat()]).get() == 1
    assert by_team(gpu) == {("unreserved", None): 180}
