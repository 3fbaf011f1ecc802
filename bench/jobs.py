"""Job reports' notes against jobs of known behaviour (docs/benchmarks.md#job-reports).

    .venv/bin/python -m bench.jobs [--jobs 3000] [--seed 32] [--workload module:function]

The workload (default `bench.jobs_workload:workload`, called with `jobs=` and `seed=`) gives
jobs with their GPU series and the notes a correct report names; each is judged by
`gpuquota.jobs.analysis.analyse` with the default thresholds, as the reports are. Prints,
per note:

    RESULT note=<code> precision=<percent> recall=<percent> expected=<n> named=<n>

then `RESULT healthy_noted=<n>` (healthy jobs given any note that wastes GPU-hours) and
`RESULT jobs_per_s=<n>` (the analysis' speed).

Then the zero-use warning: running jobs (`bench.jobs_workload:running_workload`) are scanned
every `--scan-s` seconds (the beat's interval), each scan seeing the samples that ended at
least `--lag-s` before it (the agent's batch interval); a job that stopped working is warned
at the first scan that finds its clock due:

    RESULT zero_use_warn_p95_s=<n> zero_use_warn_min_s=<n> zero_use_warn_max_s=<n>
           zero_use_missed=<n> healthy_warned=<n>

(seconds after its true threshold: when it stopped working, plus the threshold that
applies). The series go straight to the analysis: not through the agent protocol, the
database or the dev Slurm cluster.
"""

import argparse
import importlib
import time
from collections import Counter

import django


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--workload", default="bench.jobs_workload:workload")
    parser.add_argument("--running", type=int, default=400)
    parser.add_argument("--scan-s", type=int, default=120)
    parser.add_argument("--lag-s", type=int, default=60)
    args = parser.parse_args(argv)
    django.setup()
    from gpuquota.jobs.analysis import analyse

    module, _, function = args.workload.partition(":")
    jobs = getattr(importlib.import_module(module), function or "workload")(
        jobs=args.jobs, seed=args.seed)
    expected, named, hits = Counter(), Counter(), Counter()
    healthy_noted = 0
    started = time.perf_counter()
    for job in jobs:
        found = {n.code: n for n in analyse(facts=job.facts, gpus_held=job.gpus_held,
                                            series=job.series).notes}
        for code in job.expected:
            expected[code] += 1
        for code in found:
            named[code] += 1
            hits[code] += code in job.expected
        if not job.expected and any(n.severity == "waste" for n in found.values()):
            healthy_noted += 1
    took = time.perf_counter() - started
    print(f"jobs={len(jobs)} behaviours={dict(Counter(j.behaviour for j in jobs))}")
    for code in sorted(set(expected) | set(named)):
        precision = 100 * hits[code] / named[code] if named[code] else 0.0
        recall = 100 * hits[code] / expected[code] if expected[code] else 0.0
        print(f"RESULT note={code} precision={precision:.1f} recall={recall:.1f} "
              f"expected={expected[code]} named={named[code]}")
    print(f"RESULT healthy_noted={healthy_noted}")
    print(f"RESULT jobs_per_s={len(jobs) / took:.0f}")
    zero_use_bench(args)


def zero_use_bench(args) -> None:
    from datetime import timedelta

    from bench.jobs_workload import running_workload
    from gpuquota.jobs.analysis import GpuSeries
    from gpuquota.jobs.zero_use import zero_use

    delays, missed, healthy_warned = [], 0, 0
    scan, lag = timedelta(seconds=args.scan_s), timedelta(seconds=args.lag_s)
    for job in running_workload(jobs=args.running, seed=args.seed):
        end = job.start + timedelta(minutes=job.minutes)
        at = job.start + scan
        if job.zero_from is not None:  # scan from ten minutes before it is due
            at = max(at, job.zero_from + timedelta(seconds=job.threshold_s - 600))
        warned = None
        while at <= end and warned is None:
            seen = [GpuSeries(s.key, s.memory_total_bytes,
                              [p for p in s.points if p.end <= at - lag]) for s in job.series]
            clock = zero_use(series=seen, start=job.start, now=at)
            if clock is not None and clock.due:
                warned = at
            at += scan
        if job.zero_from is None:
            healthy_warned += warned is not None
        elif warned is None:
            missed += 1
        else:
            delays.append((warned - job.zero_from).total_seconds() - job.threshold_s)
    delays.sort()
    p95 = delays[min(len(delays) - 1, int(0.95 * len(delays)))] if delays else 0
    print(f"RESULT zero_use_warn_p95_s={p95:.0f} zero_use_warn_min_s={min(delays, default=0):.0f}"
          f" zero_use_warn_max_s={max(delays, default=0):.0f} zero_use_missed={missed} "
          f"healthy_warned={healthy_warned}")


if __name__ == "__main__":
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    main()
