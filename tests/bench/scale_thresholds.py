"""The calibrated thresholds of the CI scale check (`test_fleet_scale.py`), in the manner of
Kueue's performance test (test/performance/scheduler/configs/*/rangespec.yaml: each value
computed from five trial runs, the spread noted, the threshold set at a stated margin).

`fleet_scale_thresholds.json` holds, per beat loop, the most queries and the most CPU
seconds (the worker's and its PostgreSQL backend's) a steady run may take at 128 GPUs, with
the runs they were calibrated from. Recalibrate after a change that moves them on purpose:

    .venv/bin/python -m tests.bench.fleet_scale_calibrate [--runs 5] [--write]

runs the check `--runs` times with `FLEET_SCALE_RECORD` set (each run appends what it
measured to that file and checks only the growth, not the thresholds) and prints the new
file (`--write` replaces it).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path

PATH = Path(__file__).with_name("fleet_scale_thresholds.json")
RECORD_ENV = "FLEET_SCALE_RECORD"
#: Queries are counted, not timed: the most seen, plus a fifth (at least 3) for a change
#: that adds a constant query or two; a query per object at 128 GPUs is far more.
QUERY_MARGIN, QUERY_SLACK = 0.20, 3
#: CPU seconds on a shared CI machine vary: three times the most seen, and at least a quarter
#: of a second more (the loops take milliseconds here, near the clock's resolution).
CPU_FACTOR, CPU_SLACK_S = 3.0, 0.25


def recording() -> Path | None:
    """Where this run records its measurements (calibration), or None (a check)."""
    where = os.environ.get(RECORD_ENV)
    return Path(where) if where else None


def record(path: Path, measured: dict[str, dict]) -> None:
    """Append one run's measurements (per loop: queries, cpu_s) as a line of JSON."""
    with path.open("a") as out:
        out.write(json.dumps(measured, sort_keys=True) + "\n")


def over(measured: dict[str, dict], limits: dict | None = None) -> dict[str, str]:
    """The loops whose steady run at 128 GPUs is past its threshold, and by what."""
    limits = (limits or json.loads(PATH.read_text()))["loops"]
    found = {}
    for name, seen in sorted(measured.items()):
        limit = limits.get(name)
        if limit is None:
            found[name] = "no threshold: recalibrate (tests/bench/scale_thresholds.py)"
        elif seen["queries"] > limit["queries"]:
            found[name] = f"{seen['queries']} queries > {limit['queries']}"
        elif seen["cpu_s"] > limit["cpu_s"]:
            found[name] = f"{seen['cpu_s']:.3f} CPU s > {limit['cpu_s']}"
    return found


def text(thresholds: dict) -> str:
    """The thresholds file's text: a loop a line, so that a recalibration's diff reads."""
    head = {k: v for k, v in thresholds.items() if k != "loops"}
    lines = [json.dumps(head, indent=2)[:-2] + ",", '  "loops": {']
    loops = sorted(thresholds["loops"].items())
    for n, (name, limit) in enumerate(loops):
        comma = "," if n < len(loops) - 1 else ""
        lines.append(f"    {json.dumps(name)}: {json.dumps(limit)}{comma}")
    return "\n".join([*lines, "  }", "}", ""])


def calibrate(runs: list[dict[str, dict]], *, note: str) -> dict:
    """The thresholds file from several runs' measurements."""
    loops = {}
    for name in sorted(runs[0]):
        queries = [run[name]["queries"] for run in runs]
        cpu = [run[name]["cpu_s"] for run in runs]
        loops[name] = {
            "queries": max(queries) + max(QUERY_SLACK, math.ceil(max(queries) * QUERY_MARGIN)),
            "cpu_s": round(max(CPU_FACTOR * max(cpu), max(cpu) + CPU_SLACK_S), 3),
            "seen": {
                "queries": sorted(set(queries)),
                "cpu_s_mean": round(statistics.mean(cpu), 4),
                "cpu_s_stdev": round(statistics.pstdev(cpu), 4),
                "cpu_s_max": round(max(cpu), 4),
            },
        }
    return {
        "calibrated": note,
        "runs": len(runs),
        "margin": (
            f"queries: the most seen + {QUERY_MARGIN:.0%} (at least {QUERY_SLACK}); CPU "
            f"(worker + PostgreSQL backend): {CPU_FACTOR:g} x the most seen, at least + "
            f"{CPU_SLACK_S} s"
        ),
        "loops": loops,
    }
