"""Reclaim simulation: a 64-GPU fleet for 30 days on a fake clock, run twice through the
real services on PostgreSQL, without reclaim and with the hourly evaluation plus an
automatic accept of every recommendation.

    .venv/bin/python -m bench.reclaim [--days 30] [--seed 7] [--evaluate-every-h 1]

Each run gets its own database (gq_reclaimsim_off / _on, dropped first). The workload is
generated from the seed, so both runs see the same fleet and the same GPU activity:

- training jobs that finish early inside long (8- and 4-GPU) reservations;
- a steady 4-GPU training reservation, one GPU of which fails on day 12 (failed time is
  excluded from the evaluation and, as accounting.md says, credited, not judged);
- notebooks: a few active hours, then memory held at 0 % for days; one in five comes
  back for two hours later in its reservation (what a reclaim must not take);
- bursty job pairs with idle gaps of 1-6 h, shorter than the 24 h look-back;
- diurnal interactive use: 09-18 UTC on weekdays, 11-14 at weekends.

Every reservation is booked at the start by the reservation service (so both runs get the
same GPUs); the clock then advances hour by hour: `reservations_advance`, the hour's
rollup rows (written in bulk from the same 10-minute samples the evaluation's
per-slot concurrency reads), and, in the reclaim run, `recommendations_evaluate`,
`recommendations_accept_bulk` and `recommendations_release_due`. Samples after a GPU is
given back still exist (they are what its owner would have done): a **false reclaim** is
a released GPU whose owner was busy on it (at least 60 s) before the reservation's end.
Reserved-GPU utilization = busy seconds inside reserved time / reserved seconds
(`reserved_seconds`, accounting.md), failed seconds never busy.
"""

import argparse
import io
import json
import subprocess
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from bench.reclaim_workload import PER_HOUR, WINDOW_S, plan_util, plans_generate
from bench.simdb import django_on_fresh_database

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30


def run(mode: str, days: int, seed: int, every_h: int, tag: str = "") -> dict:
    """One run in its own database; returns its figures."""
    database = f"gq_reclaimsim_{mode}{tag}"
    django_on_fresh_database(database, DEBUG="1")
    return Simulation(mode=mode, days=days, seed=seed, every_h=every_h).run()


class Simulation:
    def __init__(self, *, mode: str, days: int, seed: int, every_h: int):
        from gpuquota.core.timeutil import hour_floor

        self.mode, self.days, self.every_h = mode, days, every_h
        self.t0 = hour_floor(datetime.now(UTC)) - timedelta(days=days)
        self.end = self.t0 + timedelta(days=days)
        self.plans = plans_generate(days, seed)
        for plan in self.plans:
            plan.params["t0"] = self.t0
        self.timings: dict[str, float] = defaultdict(float)

    # --- setup ---------------------------------------------------------------------
    def fleet(self):
        import uuid as uuidlib

        from accounts.models import Team, User
        from gpuquota.inventory.models import Cluster, GpuClass, GpuModelMapping, Node
        from gpuquota.inventory.services import gpu_register
        from gpuquota.rates.models import RateCard
        from gpuquota.reservations.models import Quota

        gpu_class = GpuClass.objects.create(name="H100-80GB")
        GpuModelMapping.objects.create(model_name="NVIDIA H100 80GB HBM3", gpu_class=gpu_class)
        cluster = Cluster.objects.create(name="sim", slug="sim")
        start = self.t0 - timedelta(days=1)
        gpus = []
        for n in range(8):
            node = Node.objects.create(cluster=cluster, hostname=f"sim-{n:02d}")
            for i in range(8):
                gpus.append(gpu_register(node=node, uuid=f"GPU-{uuidlib.uuid4()}",
                                         model_name="NVIDIA H100 80GB HBM3", at=start,
                                         index=i))
        teams = [Team.objects.create(name=f"Team {i}", slug=f"team-{i}") for i in range(4)]
        for team in teams:
            Quota.objects.create(team=team, gpu_class=gpu_class, gpus=64, valid_from=start)
        RateCard.objects.create(gpu_class=gpu_class, valid_from=start,
                                reserved_rate=Decimal("2.50"), on_demand_rate=Decimal("3"),
                                borrowed_rate=Decimal("1.50"))
        admin = User.objects.create(username="sim-admin", is_staff=True, is_superuser=True)
        return gpu_class, gpus, teams, admin

    def book(self, gpu_class, teams, admin) -> None:
        """Every reservation booked at t0 through the reservation service."""
        from gpuquota.reservations.services import reservation_create

        self.reservations = []
        for plan in sorted(self.plans, key=lambda p: p.start_h):
            start = self.t0 + timedelta(hours=plan.start_h)
            r = reservation_create(team=teams[plan.team], gpu_class=gpu_class,
                                   count=plan.count, start=start,
                                   end=start + timedelta(hours=plan.hours),
                                   requested_by=admin, now=self.t0)
            gpu_ids = sorted(r.assignments.values_list("gpu_id", flat=True))
            self.reservations.append((plan, r.id, gpu_ids))

    def telemetry(self, failing_gpu: int, fail_at: datetime) -> None:
        """The samples (10-minute windows) of every reserved GPU, by COPY; and the
        plan's util per GPU and window, kept for the rollups and the figures."""
        from django.db import connection

        from gpuquota.ingest.partitions import partitions_ensure
        from gpuquota.inventory.models import GpuHealthInterval

        total_w = (self.days * 24 + 72) * PER_HOUR
        self.util: dict[int, list] = defaultdict(lambda: [None] * total_w)
        self.memory: dict[int, list] = defaultdict(lambda: [0] * total_w)
        fail_w = int((fail_at - self.t0).total_seconds()) // WINDOW_S
        for plan, _rid, gpu_ids in self.reservations:
            w0 = plan.start_h * PER_HOUR
            for k, gpu_id in enumerate(gpu_ids):
                for w in range(plan.hours * PER_HOUR):
                    if w0 + w >= total_w or (gpu_id == failing_gpu and w0 + w >= fail_w):
                        continue
                    util = plan_util(plan, k, w)
                    self.util[gpu_id][w0 + w] = util
                    held = plan.kind == "notebook" or util > 0
                    self.memory[gpu_id][w0 + w] = 30 * GIB if held else 0
        partitions_ensure(days={(self.t0 + timedelta(days=d)).date()
                                for d in range(self.days + 4)})
        buffer = io.StringIO()
        now = datetime.now(UTC).isoformat()
        end_w = int((self.end - self.t0).total_seconds()) // WINDOW_S
        for gpu_id, utils in self.util.items():
            for w, util in enumerate(utils[:end_w]):
                if util is None:
                    continue
                ws = self.t0 + timedelta(seconds=w * WINDOW_S)
                we = ws + timedelta(seconds=WINDOW_S)
                buffer.write(f"{gpu_id}\t{ws.isoformat()}\t{we.isoformat()}\t60\t{util:.2f}\t"
                             f"{self.memory[gpu_id][w]}\t{now}\n")
        buffer.seek(0)
        with connection.cursor() as cursor, cursor.cursor.copy(
            "COPY ingest_sample (gpu_id, window_start, window_end, readings, util_gpu_avg, "
            "memory_used_bytes_max, received_at) FROM STDIN"
        ) as copy:
            while chunk := buffer.read(1 << 20):
                copy.write(chunk)
        GpuHealthInterval.objects.create(gpu_id=failing_gpu, state="failed", valid_from=fail_at,
                                         reason="xid 79")
        self.failing = (failing_gpu, fail_w)

    # --- the clock ---------------------------------------------------------------------
    def rollup_hour(self, hour: datetime, gpu_class_id: int) -> None:
        """The hour's reserved rollup rows, from the same windows as the samples."""
        from django.utils import timezone

        from gpuquota.reservations.models import Assignment
        from gpuquota.usage.models import GpuHourUsage

        h_end = hour + timedelta(hours=1)
        rows = []
        for a in Assignment.objects.filter(assigned_from__lt=h_end, assigned_until__gt=hour
                                           ).values("id", "gpu_id", "reservation_id",
                                                    "reservation__team_id", "assigned_from",
                                                    "assigned_until"):
            lo, hi = max(hour, a["assigned_from"]), min(h_end, a["assigned_until"])
            buckets = {}
            for w in range(int((lo - self.t0).total_seconds()) // WINDOW_S,
                           -(-int((hi - self.t0).total_seconds()) // WINDOW_S)):
                util = self.util[a["gpu_id"]][w]
                if util is None:
                    continue
                failed = a["gpu_id"] == self.failing[0] and w >= self.failing[1]
                ws = self.t0 + timedelta(seconds=w * WINDOW_S)
                seconds = int((min(hi, ws + timedelta(seconds=WINDOW_S)) - max(lo, ws))
                              .total_seconds())
                b = buckets.setdefault(failed, [0, 0, Decimal(0), 0])
                b[0] += seconds
                b[1] += seconds if util >= 5 else 0
                b[2] += Decimal(f"{util:.2f}") * seconds
                b[3] = max(b[3], self.memory[a["gpu_id"]][w])
            for failed, (covered, busy, weighted, memory) in buckets.items():
                rows.append(GpuHourUsage(
                    gpu_id=a["gpu_id"], hour=hour, gpu_class_id=gpu_class_id, kind="reserved",
                    assignment_id=a["id"], reservation_id=a["reservation_id"],
                    team_id=a["reservation__team_id"], failed=failed, covered_s=covered,
                    busy_s=busy, util_weighted=weighted, memory_used_bytes_max=memory or None,
                    computed_at=timezone.now()))
        GpuHourUsage.objects.bulk_create(rows)

    def run(self) -> dict:
        from gpuquota.reservations.services import reservations_advance
        from reclaim.lifecycle import recommendations_accept_bulk, recommendations_release_due
        from reclaim.models import Recommendation
        from reclaim.services import recommendations_evaluate

        began = time.monotonic()
        gpu_class, gpus, teams, admin = self.fleet()
        self.book(gpu_class, teams, admin)
        steady = next(g for p, _r, g in self.reservations if p.kind == "steady")
        self.telemetry(failing_gpu=steady[1], fail_at=self.t0 + timedelta(days=12))
        self.timings["setup_s"] = time.monotonic() - began
        for h in range(1, self.days * 24 + 1):
            now = self.t0 + timedelta(hours=h)
            tick, cpu = time.monotonic(), time.process_time()
            reservations_advance(now=now)
            self.rollup_hour(now - timedelta(hours=1), gpu_class.id)
            self.timings["clock_s"] += time.monotonic() - tick
            self.timings["clock_cpu_s"] += time.process_time() - cpu
            if self.mode != "on":
                continue
            tick, cpu = time.monotonic(), time.process_time()
            if h % self.every_h == 0:
                recommendations_evaluate(now=now)
                self.timings["evaluate_s"] += time.monotonic() - tick
                self.timings["evaluate_cpu_s"] += time.process_time() - cpu
                self.timings["evaluations"] += 1
                ids = list(Recommendation.objects.filter(
                    status="open", kind__in=["reclaim", "right_size"],
                    exemption__isnull=True).values_list("id", flat=True))
                if ids:
                    recommendations_accept_bulk(ids=ids, actor=admin, now=now)
            tick = time.monotonic()
            recommendations_release_due(now=now)
            self.timings["release_s"] += time.monotonic() - tick
        return self.figures()

    # --- figures -----------------------------------------------------------------------
    def figures(self) -> dict:
        from gpuquota.core.timeutil import Period
        from gpuquota.reservations.models import Assignment
        from gpuquota.usage.seconds import reserved_seconds
        from reclaim.models import Recommendation

        period = Period(self.t0, self.end)
        reserved_s = reserved_seconds(period=period)
        busy_s = 0
        planned_end = {rid: self.t0 + timedelta(hours=p.start_h + p.hours)
                       for p, rid, _g in self.reservations}
        returned_s = false_s = lost_busy_s = 0
        released = false_gpus = 0
        end_w = int((self.end - self.t0).total_seconds()) // WINDOW_S
        for a in Assignment.objects.values("gpu_id", "reservation_id", "assigned_from",
                                           "assigned_until", "end_reason"):
            lo = int((a["assigned_from"] - self.t0).total_seconds()) // WINDOW_S
            hi = min(end_w, int((a["assigned_until"] - self.t0).total_seconds()) // WINDOW_S)
            utils = self.util[a["gpu_id"]]
            for w in range(max(lo, 0), hi):
                failed = a["gpu_id"] == self.failing[0] and w >= self.failing[1]
                if utils[w] is not None and utils[w] >= 5 and not failed:
                    busy_s += WINDOW_S
            if a["end_reason"] != "reclaimed":
                continue
            released += 1
            until = min(planned_end[a["reservation_id"]], self.end)
            gone = max(0, int((until - a["assigned_until"]).total_seconds()))
            returned_s += gone
            later = sum(WINDOW_S for w in range(hi, min(end_w, hi + gone // WINDOW_S))
                        if utils[w] is not None and utils[w] >= 5)
            if later >= 60:
                false_gpus += 1
                false_s += gone
                lost_busy_s += later
        recs = Recommendation.objects.values_list("kind", "status")
        counts: dict[str, int] = defaultdict(int)
        for kind, status in recs:
            counts[f"{kind}/{status}"] += 1
        return {
            "mode": self.mode, "reserved_gpu_hours": round(reserved_s / 3600, 1),
            "busy_gpu_hours": round(busy_s / 3600, 1),
            "utilization": round(busy_s / reserved_s, 4) if reserved_s else 0,
            "gpus_released": released, "gpu_hours_returned": round(returned_s / 3600, 1),
            "false_reclaims": false_gpus, "false_reclaim_gpu_hours": round(false_s / 3600, 1),
            "false_reclaim_share": round(false_s / returned_s, 4) if returned_s else 0,
            "busy_gpu_hours_lost": round(lost_busy_s / 3600, 1),
            "recommendations": dict(counts), "reservations": len(self.reservations),
            "timings_s": {k: round(v, 1) for k, v in self.timings.items()},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--evaluate-every-h", type=int, default=1)
    parser.add_argument("--db-tag", default="", help="appended to the databases' names")
    parser.add_argument("--mode", choices=["off", "on"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        result = run(args.mode, args.days, args.seed, args.evaluate_every_h, args.db_tag)
        print("RESULT " + json.dumps(result))
        return
    results = {}
    for mode in ("off", "on"):
        began = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "bench.reclaim", "--mode", mode, "--days", str(args.days),
             "--seed", str(args.seed), "--evaluate-every-h", str(args.evaluate_every_h),
             "--db-tag", args.db_tag],
            cwd=ROOT, capture_output=True, text=True, check=False)
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            sys.exit(f"run {mode} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        results[mode] = json.loads(line.removeprefix("RESULT "))
        results[mode]["wall_s"] = round(time.monotonic() - began, 1)
    off, on = results["off"], results["on"]
    print(json.dumps(results, indent=2))
    print(f"\nreserved-GPU utilization: without reclaim {off['utilization']:.1%}, "
          f"with reclaim {on['utilization']:.1%}")
    print(f"GPU-hours returned: {on['gpu_hours_returned']} ({on['gpus_released']} GPUs); "
          f"false reclaims: {on['false_reclaims']} GPUs, "
          f"{on['false_reclaim_share']:.2%} of the returned GPU-hours")


if __name__ == "__main__":
    main()
