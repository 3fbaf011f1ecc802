"""The reliability benchmark's detectors replayed in memory (docs/benchmarks.md#reliability):
the generator's events and jobs made into the `History` that `fleet_history` would read
from the database after `bench.reliability` ingested them (the same incident merging,
taxonomy and job states), then `lemons_from` and `drift_from` at `as_of` instants. For
sweeps over seeds (calibration on 1 to 4, figures on 7 to 10) on a machine where the full
path through the database takes minutes a seed; `bench.reliability` checks the path.

    .venv/bin/python -m bench.reliability_replay --seed 7 [--seed 8 ...] [--every 5]
                                                 [--misses]

Printed per seed, as `bench.reliability` scores them: recall and precision on the last
day, false flags per evaluated day (every `--every`th day from day 90, and the last day),
the drift days (every day from the drift's day), and with `--misses` each planted lemon not
flagged on the last day with its class, multiple, incidents, expected count and p-value;
then `bench.reliability`'s RESULT line (`drain_p95_s` and `app_xid_counted`: `na`, since
neither the dev Slurm cluster nor ingestion runs here)."""

import argparse
import os
import time
from collections import defaultdict
from datetime import timedelta

from bench.reliability import (
    FIRST_EVAL_DAY,
    MODES,
    T0,
    _scores,
    found_by_multiple,
    gpu_uuid,
    truth,
)
from bench.reliability_fleet import workload


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    import django

    django.setup()


class Replay:
    """The generator's fleet as the history reads it, at any `as_of`."""

    def __init__(self, work):
        from gpuquota.reliability.history import GpuLife, _incidents

        self.work = work
        self.gpus, self.key = {}, {}
        for n, (host, klass) in enumerate(work.nodes):
            for g in range(8):
                pk = n * 8 + g + 1
                self.key[n, g] = pk
                self.gpus[pk] = GpuLife(pk, gpu_uuid(n, g), n + 1, host, "bench", klass,
                                        T0, None)
        rows = [{"gpu_id": self.key[e.node, e.gpu], "gpu__parent_id": None,
                 "ts": T0 + timedelta(seconds=e.at_s), "type": e.type, "xid": e.xid}
                for e in work.events if self._hardware(e)]
        self.incidents = _incidents(rows, self.gpus)
        t0 = T0.timestamp()
        self.jobs = [(str(i + 1), self.key[j.node, j.gpu], t0 + j.start_s,
                      None if j.end_s is None else t0 + j.end_s, j.state)
                     for i, j in enumerate(work.jobs)]

    @staticmethod
    def _hardware(event) -> bool:
        from gpuquota.ingest.taxonomy import HARDWARE_EVENT_TYPES, HARDWARE_XIDS

        return event.type in HARDWARE_EVENT_TYPES or (
            event.type == "xid" and event.xid in HARDWARE_XIDS)

    def history(self, day: int):
        from gpuquota.reliability.history import INCIDENT_GAP, History, failures_s
        from gpuquota.reliability.jobruns import JobRun, killed_jobs

        as_of = T0 + timedelta(days=day)
        incidents = [i for i in self.incidents if i.at <= as_of]
        as_of_s = as_of.timestamp()
        runs = []
        for job_id, gpu, start, end, state in self.jobs:
            if start > as_of_s:
                continue
            if end is None or end > as_of_s:
                end, state = None, ""
            runs.append(JobRun(job_id, frozenset((gpu,)), start, end, state, 1))
        killed = killed_jobs(runs, failures_s(incidents), gap_s=INCIDENT_GAP.total_seconds())
        return History(as_of, self.gpus, incidents, [], killed, runs)


def _misses(replay: Replay, history, flagged: set, *, jobs: bool) -> list[str]:
    from gpuquota.reliability.lemons import _leave_out_lemons, _test, classes_of, units

    work, lines = replay.work, []
    _, _, lemon_gpus = truth(work)
    multiple_of = {gpu_uuid(n, g): m for (n, g), m in work.lemon_gpus.items()}
    multiple_of |= {f"bench/{work.nodes[n][0]}": 5 for n in work.lemon_nodes}
    for kind in ("gpu", "node"):
        all_units = units(history, kind)
        classes = classes_of(all_units, with_warnings=True)
        for klass in classes.values():
            _leave_out_lemons(klass, history.as_of, jobs=jobs)
        for unit in all_units:
            if unit.key not in multiple_of or unit.key in flagged:
                continue
            peers = classes[unit.gpu_class]
            t = _test(unit, peers, history.as_of, jobs=jobs)
            lines.append(f"MISS {kind} {unit.gpu_class} x{multiple_of[unit.key]} incidents="
                         f"{t.incidents} expected={t.expected:.2f} jobs_failed={t.jobs_failed}"
                         f" jobs_expected={t.jobs_expected and round(t.jobs_expected, 2)} "
                         f"p={t.p_value:.2e} p_units={t.p_value * len(peers.units):.3f}")
    return lines


def run(seed: int, *, every: int, misses: bool, scale: float = 1.0, drift: bool = True,
        replay: Replay | None = None) -> dict:
    from gpuquota.reliability.drift import drift_from
    from gpuquota.reliability.lemons import lemons_from

    replay = replay or Replay(workload(days=180, seed=seed, scale=scale))
    work = replay.work
    bad_gpus, bad_nodes, _ = truth(work)
    days = sorted(set(range(FIRST_EVAL_DAY, work.days + 1, every)) | {work.days})
    false_per_day = {mode: [] for mode in MODES}
    last, lines = {}, []
    for day in days:
        history = replay.history(day)
        for mode in MODES:
            gpus = {f.key for f in lemons_from(history, kind="gpu", jobs=mode == "jobs")}
            nodes = {f.key for f in lemons_from(history, kind="node", jobs=mode == "jobs")}
            false_per_day[mode].append(len(gpus - bad_gpus) + len(nodes - bad_nodes))
            last[mode] = {"gpus": gpus, "nodes": nodes}
        if misses and day == work.days:
            for mode in MODES:
                lines += [f"{mode} {line}" for line in _misses(
                    replay, history, last[mode]["gpus"] | last[mode]["nodes"],
                    jobs=mode == "jobs")]
    drift_day, other = None, defaultdict(int)
    for day in range(FIRST_EVAL_DAY, work.days + 1) if drift else ():
        for d in drift_from(replay.history(day)):  # against the lemons of that day
            if d.kind != "class":
                continue
            if d.key == work.drift[0] and day >= work.drift[1]:
                drift_day = day if drift_day is None else drift_day
            else:
                other[d.key] += 1  # a false drift flag: another class, or before the change
    scores = {mode: _scores(work, last[mode], false_per_day[mode]) for mode in MODES}
    return {"scores": scores, "lines": lines, "other_drift_days": dict(other),
            "drift_days": None if drift_day is None else drift_day - work.drift[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, action="append", required=True)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--misses", action="store_true")
    parser.add_argument("--no-drift", action="store_true")
    parser.add_argument("--alphas", default="",
                        help="ALPHA:ALPHA_JOBS pairs to try, comma separated (calibration)")
    args = parser.parse_args()
    _setup()
    from gpuquota.reliability import lemons

    pairs = [tuple(float(x) for x in p.split(":")) for p in args.alphas.split(",") if p]
    for seed in args.seed:
        replay = Replay(workload(days=180, seed=seed, scale=args.scale))
        for pair in pairs or [(lemons.ALPHA, lemons.ALPHA_JOBS)]:
            lemons.ALPHA, lemons.ALPHA_JOBS = pair
            print(f"seed {seed}: ALPHA={pair[0]} ALPHA_JOBS={pair[1]}")
            _report(seed, args, replay)


def _report(seed: int, args, replay: Replay) -> None:
    started = time.process_time()
    result = run(seed, every=args.every, misses=args.misses, drift=not args.no_drift,
                 replay=replay)
    for line in result["lines"]:
        print(f"seed {seed}: {line}")
    for mode in ("incidents", "jobs"):
        s = result["scores"][mode]
        found = found_by_multiple(s)
        print(f"seed {seed}: signal={mode} recall={s['recall']:.1f} precision="
              f"{s['precision']:.1f} false_flags_per_day={s['false_flags_per_day']:.2f} "
              f"max={s['false_flags_max']} {found}")
    print(f"seed {seed}: drift_days={result['drift_days']} false_drift_class_days="
          f"{result['other_drift_days'] or 'none'} "
          f"cpu_s={time.process_time() - started:.0f}")
    s = result["scores"]["jobs"]  # bench.reliability's RESULT (no drain, no ingestion here)
    print(f"RESULT lemon_recall={s['recall']:.1f} lemon_precision={s['precision']:.1f} "
          f"false_flags_per_day={s['false_flags_per_day']:.2f} drift_days="
          f"{'none' if result['drift_days'] is None else result['drift_days']} "
          f"drain_p95_s=na app_xid_counted=na", flush=True)


if __name__ == "__main__":
    main()
