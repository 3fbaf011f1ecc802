"""Hard reclaim that survives a realistic mix (RECLAIM_RULE=guarded, the default, which
these tests run under): each guard refuses
its case, where the spec's rule recommends, and a truly abandoned reservation is still
recommended; the evaluation and the backtest apply the same guards, and the backtest
reports each rule's false share on the same history."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from gpuquota.reservations.models import Assignment
from gpuquota.usage.models import GpuHourUsage
from reclaim.backtest import policy_backtest, rules_backtest
from reclaim.conf import policy
from reclaim.evaluation import findings_evaluate
from reclaim.models import Recommendation
from reclaim.services import recommendations_evaluate
from tests.factories import make_gpu
from tests.reclaim.factories import DAY, GIB, NOW, World, held_gpus, rollup, telemetry

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
SUNDAY = NOW - DAY  # NOW is Monday 30 Nov 2026 12:00 UTC


def test_guarded_is_the_default_and_the_spec_rule_stays_selectable(settings, monkeypatch):
    monkeypatch.delenv("RECLAIM_RULE", raising=False)
    settings.RECLAIM_RULE = None
    assert policy().rule == "guarded"
    settings.RECLAIM_RULE = "spec"
    assert policy().rule == "spec"
    settings.RECLAIM_RULE = "idle"
    with pytest.raises(ImproperlyConfigured, match="RECLAIM_RULE is 'idle'"):
        policy()


def assignments(reservation) -> list[Assignment]:
    return list(reservation.assignments.select_related("gpu", "reservation").order_by("gpu_id"))


def stored(a: Assignment, start, end, *, busy=lambda hour: 0, util=None, memory=None,
           processes=0) -> None:
    """Rollup rows of one assignment, hour by hour, fully reported: `busy(hour)` busy
    seconds; `util` the mean utilization in % (80 on busy seconds by default)."""
    rows, hour = [], start
    while hour < end:
        b = busy(hour)
        weighted = Decimal(80 * b) if util is None else Decimal(util * 3600)
        rows.append(GpuHourUsage(
            gpu_id=a.gpu_id, hour=hour, gpu_class_id=a.gpu.gpu_class_id, kind="reserved",
            assignment=a, reservation_id=a.reservation_id, team_id=a.reservation.team_id,
            covered_s=3600, busy_s=b, util_weighted=weighted, memory_used_bytes_max=memory,
            process_count=processes, computed_at=timezone.now()))
        hour += H
    GpuHourUsage.objects.bulk_create(rows)


def used_elsewhere(world, team, gpu, start, hours: int) -> None:
    """The team busy on a GPU outside its reservations (unreserved rows it owns)."""
    GpuHourUsage.objects.bulk_create([GpuHourUsage(
        gpu=gpu, hour=start + i * H, gpu_class=world.gpu_class, kind="unreserved", team=team,
        covered_s=3600, busy_s=3600, util_weighted=Decimal(80 * 3600), process_count=1,
        computed_at=timezone.now()) for i in range(hours)])


def weekday_hours(hour) -> int:
    """Busy Monday to Friday 09:00-17:00 UTC."""
    return 3600 if hour.weekday() < 5 and 9 <= hour.hour < 17 else 0


def found(reservation, now, rule=None, **changes):
    """(GPUs recommended, {GPU id: (state, guard)}) of the evaluation at `now`."""
    p = policy().override(rule=rule, **changes)
    result = findings_evaluate(reservations=[reservation], now=now, policy=p)[reservation.id]
    reclaim = result.of_kind("reclaim")
    states = {int(g): (ev["state"], ev.get("guard")) for g, ev in result.gpus.items()}
    return (sorted(reclaim.gpu_ids) if reclaim else []), states


def test_a_truly_abandoned_reservation_is_recommended():
    """Used for two days a month ago, then reported empty (no process, no memory, 0 %)."""
    world = World.create()
    reservation = world.reserve(count=2, start=NOW - 30 * DAY, end=NOW + 10 * DAY)
    for a in assignments(reservation):
        stored(a, NOW - 30 * DAY, NOW, busy=lambda h: 3600 if h < NOW - 28 * DAY else 0)
    gpus, _ = found(reservation, NOW)
    assert gpus == sorted(g.id for g in held_gpus(reservation))
    assert found(reservation, NOW)[1] == {g.id: ("idle", None) for g in held_gpus(reservation)}


def test_a_truly_abandoned_reservation_is_recommended_from_real_telemetry(settings):
    """The same through the agents' samples and the real rollup sweep, and the service
    (a day of samples: the history gate asks for one here)."""
    settings.RECLAIM_HISTORY_DAYS = 1
    world = World.create()
    reservation = world.reserve(count=1, start=NOW - 3 * DAY, end=NOW + DAY)
    [gpu] = held_gpus(reservation)
    telemetry(gpu, start=NOW - 26 * H, end=NOW, util=0, window_s=300)
    rollup()
    recommendations_evaluate(now=NOW)
    [rec] = Recommendation.objects.filter(kind="reclaim")
    assert [g.id for g in rec.gpus.all()] == [gpu.id]
    assert rec.evidence["gpus"][str(gpu.id)]["rule"] == "guarded"


def test_a_weekday_team_keeps_its_gpus_over_the_weekend():
    world = World.create()
    reservation = world.reserve(count=2, start=NOW - 22 * DAY, end=NOW + 10 * DAY)
    for a in assignments(reservation):
        stored(a, NOW - 22 * DAY, SUNDAY, busy=weekday_hours)
    gpus = [g.id for g in held_gpus(reservation)]
    assert found(reservation, SUNDAY, rule="spec")[0] == gpus  # idle since Friday 17:00
    assert found(reservation, SUNDAY)[0] == []
    # its GPUs were silent as long every weekend: the usual gap keeps them first
    assert found(reservation, SUNDAY)[1] == {g: ("guarded", "gap") for g in gpus}
    # without that guard, the recurring weekday hours keep them
    assert found(reservation, SUNDAY, gap_factor=0)[1] == {
        g: ("guarded", "pattern") for g in gpus}


def test_a_new_weekday_team_is_kept_by_its_daily_pattern():
    """One week of history only: the same hours on five days make a daily pattern."""
    world = World.create()
    reservation = world.reserve(count=1, start=NOW - 8 * DAY, end=NOW + 10 * DAY)
    [a] = assignments(reservation)
    stored(a, NOW - 8 * DAY, SUNDAY, busy=weekday_hours)
    assert found(reservation, SUNDAY, rule="spec")[0] == [a.gpu_id]
    assert found(reservation, SUNDAY)[1] == {a.gpu_id: ("guarded", "pattern")}


def test_gpus_beyond_the_recurring_demand_still_go():
    """The weekday team uses 2 of its 4 GPUs: the 2 it never uses are recommended."""
    world = World.create()
    reservation = world.reserve(count=4, start=NOW - 22 * DAY, end=NOW + 10 * DAY)
    used, unused = assignments(reservation)[:2], assignments(reservation)[2:]
    for a in used:
        stored(a, NOW - 22 * DAY, SUNDAY, busy=weekday_hours)
    for a in unused:
        stored(a, NOW - 22 * DAY, SUNDAY)
    assert found(reservation, SUNDAY)[0] == sorted(a.gpu_id for a in unused)
    states = found(reservation, SUNDAY, gap_factor=0)[1]
    assert sorted(states.values()) == [("guarded", "pattern")] * 2 + [
        ("idle", None)] * 2


def test_sweeps_in_waves_keep_their_gpus_between_waves():
    """Waves of 6 h every 4 days: three days after the last one the GPUs have been
    silent no longer than between waves; after twice that they go."""
    world = World.create()
    reservation = world.reserve(count=2, start=NOW - 20 * DAY, end=NOW + 10 * DAY)
    waves = [NOW - 20 * DAY + k * 96 * H for k in range(5)]  # the last ends 90 h before NOW
    for a in assignments(reservation):
        stored(a, NOW - 20 * DAY, NOW + 5 * DAY,
               busy=lambda h: 3600 if any(w <= h < w + 6 * H for w in waves) else 0)
    gpus = [g.id for g in held_gpus(reservation)]
    assert found(reservation, NOW, rule="spec")[0] == gpus
    assert found(reservation, NOW)[1] == {g: ("guarded", "gap") for g in gpus}
    assert found(reservation, NOW + 3 * DAY)[0] == []  # 162 h: under twice 90 h
    assert found(reservation, NOW + 4 * DAY)[0] == gpus  # 186 h: the team is gone


def test_a_gpu_back_from_a_failure_is_silent_only_since_it_reported_again():
    """Waves of 6 h every 30 h, then the node fails for three days (nothing reported, a
    wave missed), then 30 h of empty reports: the owner may have come back while it was
    down, so its silence is the 30 h since, under twice the 24 h between waves. The same
    GPU reporting empty all along has been silent 5 days: it goes."""
    world = World.create()
    start = NOW - 10 * DAY
    waves = [start + k * 30 * H for k in range(4)]  # the last ends at start + 96 h
    down = (start + 102 * H, NOW - 30 * H)

    def busy(hour):
        return 3600 if any(w <= hour < w + 6 * H for w in waves) else 0

    failed, steady = (world.reserve(count=1, start=start, end=NOW + DAY) for _ in range(2))
    [a] = assignments(failed)
    stored(a, start, down[0], busy=busy)
    stored(a, down[1], NOW)
    [b] = assignments(steady)
    stored(b, start, NOW, busy=busy)
    assert found(failed, NOW)[1] == {a.gpu_id: ("guarded", "gap")}
    assert found(steady, NOW)[0] == [b.gpu_id]


def test_a_failed_jobs_debugging_gap_is_not_reclaimed():
    """8-GPU-style training (here 2) ran 3 h and failed 40 h ago; the team has been busy
    on another GPU since, debugging: it will resubmit."""
    world = World.create()
    reservation = world.reserve(count=2, start=NOW - 8 * DAY, end=NOW + 5 * DAY)
    run = range(int((NOW - 43 * H).timestamp()), int((NOW - 40 * H).timestamp()))
    for a in assignments(reservation):
        stored(a, NOW - 8 * DAY, NOW,
               busy=lambda h: 3600 if int(h.timestamp()) in run else 0)
    gpus = [g.id for g in held_gpus(reservation)]
    assert found(reservation, NOW, rule="spec")[0] == gpus
    assert found(reservation, NOW)[0] == gpus  # nobody active elsewhere: the team left
    debug_gpu = make_gpu(gpu_class=world.gpu_class, index=20)
    used_elsewhere(world, world.team, debug_gpu, NOW - 20 * H, 4)
    assert found(reservation, NOW)[0] == []
    assert found(reservation, NOW)[1] == {g: ("guarded", "retry_gap") for g in gpus}
    # a run as long as RECLAIM_RETRY_SHORT_RUN_S is a job that completed, not one that failed
    assert found(reservation, NOW, retry_short_run=3 * H)[0] == gpus


def test_an_inference_service_below_the_busy_threshold_is_not_reclaimed():
    """A process holding 20 GiB at 3 % utilization: no busy second, but it serves."""
    world = World.create()
    reservation = world.reserve(count=1, start=NOW - 3 * DAY, end=NOW + DAY)
    [a] = assignments(reservation)
    stored(a, NOW - 3 * DAY, NOW, util=3, memory=20 * GIB, processes=60)
    assert found(reservation, NOW, rule="spec")[0] == [a.gpu_id]
    assert found(reservation, NOW)[0] == []
    assert found(reservation, NOW)[1] == {a.gpu_id: ("guarded", "serving")}


@pytest.mark.parametrize("signal, expected", [
    ({"memory": 8 * GIB}, "held"),
    ({"processes": 1}, "held"),
    ({"busy": lambda h: 120 if h == NOW - 5 * H else 0}, "busy"),
])
def test_both_signals_must_agree(signal, expected):
    """Memory or a process held at 0 %, or a few busy seconds with nothing held: one
    signal says idle, the other does not."""
    world = World.create()
    reservation = world.reserve(count=1, start=NOW - 3 * DAY, end=NOW + DAY)
    [a] = assignments(reservation)
    stored(a, NOW - 3 * DAY, NOW, **signal)
    assert found(reservation, NOW, rule="spec")[0] == [a.gpu_id]
    assert found(reservation, NOW)[0] == []
    assert found(reservation, NOW)[1] == {a.gpu_id: ("guarded", expected)}


def test_the_guards_settings_are_checked(settings):
    settings.RECLAIM_PATTERN_WEEKS = 2
    settings.RECLAIM_PATTERN_MIN_WEEKS = 3
    with pytest.raises(ImproperlyConfigured, match="RECLAIM_PATTERN_MIN_WEEKS"):
        policy()
    settings.RECLAIM_PATTERN_MIN_WEEKS = 2
    settings.RECLAIM_RETRY_WINDOW_S = 3600
    settings.RECLAIM_GAP_FACTOR = "1.5"
    assert policy().retry_window == H and policy().gap_factor == Decimal("1.5")


def weekday_and_abandoned(world, now):
    """Five weeks of a weekday team (2 GPUs) and of a reservation abandoned after two
    days of use five weeks before `now` (no recurring use left)."""
    weekday = world.reserve(count=2, start=now - 35 * DAY, end=now + 10 * DAY, now=now)
    abandoned = world.reserve(count=1, team=world.other_team, start=now - 35 * DAY,
                              end=now + 10 * DAY, now=now)
    for a in assignments(weekday):
        stored(a, now - 35 * DAY, now, busy=weekday_hours)
    [gone] = assignments(abandoned)
    stored(gone, now - 35 * DAY, now, busy=lambda h: 3600 if h < now - 33 * DAY else 0)
    return weekday, abandoned, gone


def test_the_backtest_reports_each_rules_false_share():
    """The spec's rule takes the weekday team's GPUs on a weekend and they are busy
    again on Monday (false); the guarded rule takes only the abandoned one."""
    world = World.create()
    weekday, abandoned, gone = weekday_and_abandoned(world, NOW)
    results = rules_backtest(policy=policy(), days=14, now=NOW)
    assert set(results) == {"spec", "evidence", "guarded"}
    spec, guarded = results["spec"], results["guarded"]
    assert spec.false_reclaims == 2 and spec.false_reclaim_rate == Decimal(2) / 3
    assert guarded.false_reclaims == 0 and guarded.false_reclaim_rate == 0
    assert [(r.reservation_id, r.gpu_ids) for r in guarded.recommendations] == [
        (abandoned.id, [gone.gpu_id])]
    # the evaluation at the same hour agrees with the backtest's guarded replay
    at = guarded.recommendations[0].recommended_at
    assert found(abandoned, at)[0] == [gone.gpu_id]
    assert found(weekday, NOW - 2 * DAY)[0] == []  # a Saturday
    assert policy_backtest(policy=policy(), days=14, now=NOW).false_reclaims == 0


def test_steady_use_then_abandoned_goes_once_it_leaves_the_pattern_window():
    """Used around the clock for two weeks, then nothing: every hour of the week recurs
    in two of the last four weeks until the use is three weeks old."""
    world = World.create()
    reservation = world.reserve(count=1, start=NOW - 40 * DAY, end=NOW + 10 * DAY)
    [a] = assignments(reservation)
    stored(a, NOW - 40 * DAY, NOW, busy=lambda h: 3600 if h < NOW - 26 * DAY else 0)
    assert found(reservation, NOW - 6 * DAY)[1] == {a.gpu_id: ("guarded", "pattern")}
    assert found(reservation, NOW)[0] == [a.gpu_id]
    assert policy_backtest(policy=policy(), days=14, now=NOW).false_reclaims == 0


def test_the_guards_read_in_a_bounded_number_of_queries():
    """Whatever the number of candidates and teams, the guards add two queries."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    world = World.create(gpus=8)
    counts, reservations = [], []
    for n in (1, 3):
        while len(reservations) < n:
            team = world.team if len(reservations) % 2 == 0 else world.other_team
            r = world.reserve(count=1, team=team, start=NOW - 9 * DAY)
            [a] = assignments(r)
            stored(a, NOW - 9 * DAY, NOW, busy=weekday_hours)
            reservations.append(r)
        with CaptureQueriesContext(connection) as captured:
            results = findings_evaluate(reservations=reservations, now=SUNDAY, policy=policy())
        counts.append(len(captured))
        assert {ev["state"] for r in results.values() for ev in r.gpus.values()} == {"guarded"}
    assert counts[0] == counts[1], counts
