"""Owners follow the covering sample (accounting.md, Usage samples), priced to the cent:
the owner teams of a covered second are those of the process records stored with the
sample that covers it, never those of a duplicate sample's records nor of an earlier
window that a later sample cuts short (issue 20 §1). On-demand rate 3.00 per GPU-hour."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import transaction

from gpuquota.core.timeutil import Period
from gpuquota.ingest.models import ProcessRecord, Sample
from gpuquota.outbox.services import gpu_hours_mark_dirty
from gpuquota.usage.sweep import dirty_hours_process
from reports.pricing import team_drafts
from tests.factories import GpuClassFactory, RateCardFactory, make_gpu
from tests.usage.factories import add_samples, team_with_user

pytestmark = pytest.mark.django_db
S, M = timedelta(seconds=1), timedelta(minutes=1)
T = datetime(2026, 10, 12, 9, 0, tzinfo=UTC)
OCTOBER = Period.month(2026, 10)


@pytest.fixture
def world():
    gpu_class = GpuClassFactory(name="L4")
    RateCardFactory(gpu_class=gpu_class, on_demand_rate=Decimal("3.00"))
    gpu = make_gpu(gpu_class=gpu_class)
    vision, _ = team_with_user("vision", "alice", gpu.node.cluster)
    speech, _ = team_with_user("speech", "bob", gpu.node.cluster)
    return gpu, vision, speech


def window(gpu, start, seconds, user, received, pid):
    """One sample and its process record, as one batch stores them (first stored wins)."""
    add_samples(gpu, [{"start": start, "seconds": seconds, "util": 90, "received_at": received}])
    with transaction.atomic():
        ProcessRecord.objects.create(
            gpu=gpu, window_start=start, window_end=start + seconds * S, pid=pid, pid_start=1,
            user=user, command="python", job_source="unix", received_at=received)
        gpu_hours_mark_dirty(marks=[(gpu.id, start)])


def on_demand(*teams):
    while dirty_hours_process():
        pass
    drafts = team_drafts(period=OCTOBER, month=OCTOBER.start.date())
    return [[(line.kind, line.seconds, line.amount) for line in drafts[team.id].lines]
            if team.id in drafts else [] for team in teams]


def test_a_duplicate_windows_process_owns_nothing(world):
    gpu, vision, speech = world
    window(gpu, T, 600, "alice", received=T + 10 * M, pid=1)
    window(gpu, T, 600, "bob", received=T + 11 * M, pid=2)  # the same window, sent again
    assert Sample.objects.filter(gpu=gpu).count() == 1
    assert ProcessRecord.objects.filter(gpu=gpu).count() == 2  # stored, but not the sample's
    # before: 300 s each (0.25 and 0.25)
    assert on_demand(vision, speech) == [[("on_demand", 600, Decimal("0.50"))], []]


def test_a_window_cut_short_owns_only_what_its_sample_covers(world):
    gpu, vision, speech = world
    window(gpu, T, 600, "alice", received=T + 10 * M, pid=1)
    window(gpu, T + 7 * M + 30 * S, 600, "bob", received=T + 18 * M, pid=2)
    # alice's sample covers [09:00, 09:07:30), bob's [09:07:30, 09:17:30); before, the
    # 150 s that alice's record still spanned were split: 525 s each (0.44 and 0.44)
    assert on_demand(vision, speech) == [
        [("on_demand", 450, Decimal("0.38"))],  # 450 x 3.00 / 3600 = 0.375
        [("on_demand", 600, Decimal("0.50"))],
    ]


def test_records_of_one_batch_share_their_sample(world):
    gpu, vision, speech = world
    window(gpu, T, 300, "alice", received=T + 5 * M, pid=1)
    with transaction.atomic():  # a second process stored with the same sample
        ProcessRecord.objects.create(
            gpu=gpu, window_start=T, window_end=T + 300 * S, pid=3, pid_start=1, user="bob",
            command="python", job_source="unix", received_at=T + 5 * M)
    assert on_demand(vision, speech) == [[("on_demand", 150, Decimal("0.13"))],  # 0.125
                                         [("on_demand", 150, Decimal("0.13"))]]


def test_a_split_share_shows_whole_seconds_and_bills_the_exact_share(world, client):
    from tests.factories import AdminFactory

    gpu, vision, speech = world
    robotics, _ = team_with_user("robotics", "carol", gpu.node.cluster)
    starts = [(T + i * 600 * S, 600) for i in range(8)] + [(T + 4800 * S, 70)]
    for n, (start, seconds) in enumerate(starts):
        received = start + seconds * S
        window(gpu, start, seconds, "alice", received=received, pid=10 * n + 1)
        for pid, user in ((10 * n + 2, "bob"), (10 * n + 3, "carol")):
            ProcessRecord.objects.create(
                gpu=gpu, window_start=start, window_end=received, pid=pid, pid_start=1,
                user=user, command="python", job_source="unix", received_at=received)
    # each team's share is 4870 / 3 = 1623.33 s: shown as 1623 s, billed exactly
    # (4870 / 3 x 3.00 / 3600 = 1.3528; 1623 s would give 1.3525, the same cent here)
    assert on_demand(vision, speech, robotics) == [[("on_demand", 1623, Decimal("1.35"))]] * 3
    client.force_login(AdminFactory())
    [line] = client.get("/api/v1/statements/robotics/2026-10").json()["lines"]
    assert line["seconds"] == 1623 and isinstance(line["seconds"], int)
    assert (line["hours"], line["amount"]) == ("0.45", "1.35")
    assert '"on_demand","L4","1623","0.45","3.00","1.35"' in client.get(
        "/api/v1/statements/robotics/2026-10.csv").content.decode()
