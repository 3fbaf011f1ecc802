"""Job reports' notes against jobs of known behaviour (docs/benchmarks.md#job-reports).

    .venv/bin/python -m bench.jobs [--jobs 3000] [--seed 32] [--workload module:function]

The workload (default `bench.jobs_workload:workload`, called with `jobs=` and `seed=`) gives
jobs with their GPU series and the notes a correct report names; each is judged by
`gpuquota.jobs.analysis.analyse` with the default thresholds, as the reports are. Prints,
per note:

    RESULT note=<code> precision=<percent> recall=<percent> expected=<n> named=<n>

then `RESULT healthy_noted=<n>` (healthy jobs given any note that wastes GPU-hours) and
`RESULT jobs_per_s=<n>` (the analysis' speed). The series go straight to the analysis: not
through the agent protocol, the database or the dev Slurm cluster.
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


if __name__ == "__main__":
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    main()
