"""Each reclaim rule's false share on a realistic mix (docs/reclaim.md, "Hard reclaim"):
the product's backtest (`reclaim.backtest.rules_backtest`) over a history built from the
failure modes a new site meets, in its own database (`gq_reclaimrules`, dropped first).

    .venv/bin/python -m bench.reclaim_rules [--days 30] [--history-days 28] [--seed 7]

The history is written as the hourly rollups the backtest reads (one row per assigned
GPU and hour), on reservations booked by the reservation service, all ended by the
backtest's end so that every owner's return is in it:

- a team that works on weekdays 09-18 UTC on 6 of its 8 GPUs (2 unused after a week);
- 8-GPU training whose jobs (12-72 h) fail early one time in three (after 1-4 h) and are
  resubmitted after 6 h to 3 days of debugging on the team's 1-GPU debug reservation;
  its node fails for three days;
- inference services: a process holding 20 GiB at 3 %, a few busy seconds an hour;
- notebooks: a few active hours, then memory held at 0 % (or the kernel shut down, nothing
  held); half of them come back after 2-5 days;
- hyper-parameter sweeps on 8 GPUs in waves of 4-8 h every 2-5 days;
- reservations abandoned after 3-7 days of use (what hard reclaim is for).

Prints `MIX seed=<n> gpus=<n> abandoned_gpu_h=<n>` (what a perfect rule could return: each
GPU's hours after its owner's last use, look-back and grace) and one line per rule:
`RULE rule=<name> recommendations=<n> gpus_released=<n> false_reclaims=<n>
false_share=<percent> gpu_hours_returned=<n>`, with its false reclaims by team.
"""

import argparse
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from bench.simdb import django_on_fresh_database

GIB = 2**30
H = timedelta(hours=1)
NOTHING = None  # no row: the agent reported nothing (the GPU was not in use)


def _hour(busy_s=0, util=0.0, memory=0, processes=0, failed=False) -> tuple:
    return busy_s, util, memory, processes, failed


IDLE = _hour()
BUSY = _hour(3600, 85.0, 60 * GIB, 1)


class Mix:
    """Per lane: a reservation (team, count, start, hours) and its GPUs' hours."""

    def __init__(self, *, start: datetime, hours: int, seed: int):
        self.start, self.hours, self.rng = start, hours, random.Random(seed)
        self.lanes: list[dict] = []

    def lane(self, team: str, count: int, start_h: int, hours: int) -> list[list]:
        gpus = [[IDLE] * hours for _ in range(count)]
        self.lanes.append({"team": team, "count": count, "start_h": start_h, "hours": hours,
                           "gpus": gpus})
        return gpus

    def at(self, start_h: int, h: int) -> datetime:
        return self.start + (start_h + h) * H

    def build(self) -> "Mix":
        self.weekday()
        self.training()
        self.serving()
        self.notebooks()
        self.sweeps()
        self.abandoned()
        return self

    def weekday(self) -> None:
        gpus = self.lane("weekday", 8, 0, self.hours)
        for h in range(self.hours):
            at = self.at(0, h)
            working = at.weekday() < 5 and 9 <= at.hour < 18
            for k, hours in enumerate(gpus):
                if working and (k < 6 or h < 7 * 24) and self.rng.random() < 0.9:
                    hours[h] = BUSY

    def training(self) -> None:
        gpus = self.lane("training", 8, 0, self.hours)
        debug = self.lane("training", 1, 0, self.hours)[0]
        h = self.rng.randint(0, 12)
        while h < self.hours:
            if self.rng.random() < 1 / 3:  # fails early, debugged, resubmitted
                run, gap = self.rng.randint(1, 4), self.rng.randint(6, 72)
                for d in range(h + run, min(h + run + gap, self.hours)):
                    if (d - h - run) % 24 < 5:
                        debug[d] = BUSY
            else:
                run, gap = self.rng.randint(12, 72), self.rng.randint(2, 24)
            for t in range(h, min(h + run, self.hours)):
                for hours in gpus:
                    hours[t] = BUSY
            h += run + gap
        down = 40 * 24
        for t in range(down, min(down + 72, self.hours)):
            for hours in gpus:
                hours[t] = _hour(failed=True)

    def serving(self) -> None:
        for hours in self.lane("serving", 4, 0, self.hours):
            for h in range(self.hours):
                hours[h] = _hour(self.rng.randint(0, 200), 3.0, 20 * GIB, 1)

    def notebooks(self) -> None:
        for _lane in range(8):
            h = self.rng.randint(0, 48)
            while h < self.hours - 48:
                length = min(self.rng.randint(7 * 24, 20 * 24), self.hours - h)
                [hours] = self.lane("notebooks", 1, h, length)
                kernel_open = self.rng.random() < 0.6
                active = self.rng.randint(2, 5)
                for t in range(length):
                    hours[t] = (_hour(3600, 35.0, 30 * GIB, 1) if t < active else
                                _hour(0, 0.0, 30 * GIB, 1) if kernel_open else IDLE)
                if self.rng.random() < 0.5:
                    back = active + self.rng.randint(48, 120)
                    for t in range(back, min(back + 3, length)):
                        hours[t] = _hour(3600, 35.0, 30 * GIB, 1)
                h += length + self.rng.randint(2, 30)

    def sweeps(self) -> None:
        gpus = self.lane("sweeps", 8, 0, self.hours)
        h = self.rng.randint(0, 24)
        while h < self.hours:
            for t in range(h, min(h + self.rng.randint(4, 8), self.hours)):
                for hours in gpus:
                    hours[t] = BUSY
            h += self.rng.randint(48, 120)

    def abandoned(self) -> None:
        for _ in range(3):
            start_h = self.rng.randint(0, self.hours // 2)
            length = min(self.rng.randint(20 * 24, 40 * 24), self.hours - start_h)
            used = self.rng.randint(3 * 24, 7 * 24)
            for hours in self.lane("abandoned", 4, start_h, length):
                for t in range(min(used, length)):
                    hours[t] = BUSY


def abandoned_gpu_hours(mix: Mix, *, lookback_h: int, grace_h: int, first_h: int) -> int:
    """What a perfect rule could return in the backtest's hours: each assigned GPU's
    hours after its owner's last use, its look-back and its grace."""
    total = 0
    for lane in mix.lanes:
        for hours in lane["gpus"]:
            last = max((h for h, v in enumerate(hours) if v[0] or v[2] or v[3] or v[4]),
                       default=-1)
            since = max(lane["start_h"] + last + 1 + lookback_h, first_h)
            total += max(0, lane["start_h"] + lane["hours"] - since - grace_h)
    return total


def _store(mix: Mix, now: datetime) -> None:
    """Book every lane through the reservation service and write its hourly rollups."""
    import uuid as uuidlib

    from django.utils import timezone

    from accounts.models import Team, User
    from gpuquota.inventory.models import Cluster, GpuClass, GpuModelMapping, Node
    from gpuquota.inventory.services import gpu_register
    from gpuquota.reservations.models import Quota
    from gpuquota.reservations.services import reservation_create
    from gpuquota.usage.models import GpuHourUsage

    gpu_class = GpuClass.objects.create(name="H100-80GB")
    GpuModelMapping.objects.create(model_name="NVIDIA H100 80GB HBM3", gpu_class=gpu_class)
    cluster = Cluster.objects.create(name="mix", slug="mix")
    since = mix.start - timedelta(days=1)
    for n in range(12):
        node = Node.objects.create(cluster=cluster, hostname=f"mix-{n:02d}")
        for i in range(8):
            gpu_register(node=node, uuid=f"GPU-{uuidlib.uuid4()}",
                         model_name="NVIDIA H100 80GB HBM3", at=since, index=i)
    admin = User.objects.create(username="mix-admin", is_staff=True, is_superuser=True)
    teams = {}
    for name in sorted({lane["team"] for lane in mix.lanes}):
        teams[name] = Team.objects.create(name=name.title(), slug=name)
        Quota.objects.create(team=teams[name], gpu_class=gpu_class, gpus=96, valid_from=since)
    rows, computed = [], timezone.now()
    for lane in sorted(mix.lanes, key=lambda lane: lane["start_h"]):
        start = mix.at(lane["start_h"], 0)
        r = reservation_create(team=teams[lane["team"]], gpu_class=gpu_class,
                               count=lane["count"], start=start,
                               end=start + lane["hours"] * H, requested_by=admin, now=now)
        for a, hours in zip(r.assignments.order_by("gpu_id"), lane["gpus"], strict=True):
            for h, value in enumerate(hours):
                busy, util, memory, processes, failed = value
                rows.append(GpuHourUsage(
                    gpu_id=a.gpu_id, hour=start + h * H, gpu_class=gpu_class, kind="reserved",
                    assignment=a, reservation=r, team=teams[lane["team"]], failed=failed,
                    covered_s=3600, busy_s=0 if failed else busy,
                    util_weighted=Decimal(f"{util * 3600:.2f}"),
                    memory_used_bytes_max=memory or None, process_count=processes,
                    computed_at=computed))
    GpuHourUsage.objects.bulk_create(rows, batch_size=5000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30, help="the backtest's days (30)")
    parser.add_argument("--history-days", type=int, default=28,
                        help="history before them, for the look-backs and the guards (28)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    django_on_fresh_database("gq_reclaimrules")
    from reclaim.backtest import rules_backtest
    from reclaim.conf import policy

    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - H
    hours = (args.days + args.history_days) * 24
    mix = Mix(start=end - hours * H, hours=hours, seed=args.seed).build()
    _store(mix, now=end)
    p = policy()
    abandoned = abandoned_gpu_hours(mix, lookback_h=p.lookback // H, grace_h=p.grace // H,
                                    first_h=hours - args.days * 24)
    print(f"MIX seed={args.seed} gpus={sum(lane['count'] for lane in mix.lanes)} "
          f"abandoned_gpu_h={abandoned}")
    for rule, result in rules_backtest(policy=p, days=args.days, now=end).items():
        print(f"RULE rule={rule} recommendations={len(result.recommendations)} "
              f"gpus_released={result.gpus_released} false_reclaims={result.false_reclaims} "
              f"false_share={result.false_reclaim_rate * 100:.1f} "
              f"gpu_hours_returned={result.gpu_hours_returned:.1f}")
        false_teams: dict[str, int] = {}
        for rec in result.recommendations:
            if rec.false_gpu_ids:
                false_teams[rec.team] = false_teams.get(rec.team, 0) + len(rec.false_gpu_ids)
        print(f"  false by team: {false_teams}")


if __name__ == "__main__":
    main()
