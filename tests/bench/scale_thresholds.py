"""The calibrated thresholds of the CI scale check (`test_fleet_scale.py`), in the manner of
Kueue's performance test (test/performance/scheduler/configs/*/rangespec.yaml: each value
computed from five trial runs, the spread noted, the threshold set at a stated margin).

`fleet_scale_thresholds.json` holds, per beat loop (`loops`) and per page of
bench.fleet_scale_pages (`pages`), the most queries and the most CPU seconds (the worker's
and its PostgreSQL backend's) a steady run or a request may take at 128 GPUs, with the runs
they were calibrated from: a query per object creeping into a loop or a page fails the
check. Recalibrate after a change that moves them on purpose:

    .venv/bin/python -m tests.bench.fleet_scale_calibrate [--runs 5] [--write]

runs the check `--runs` times with `FLEET_SCALE_RECORD` set (each run appends what it
measured to that file and checks only the growth, not the thresholds) and prints the new
file (`--write` replaces it), each threshold the larger of the runs' and the file's before
(a quieter machine does not tighten them).
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
#: What is measured: the beat loops' steady runs, the pages' requests.
SECTIONS = ("loops", "pages")


def recording() -> Path | None:
    """Where this run records its measurements (calibration), or None (a check)."""
    where = os.environ.get(RECORD_ENV)
    return Path(where) if where else None


def record(path: Path, measured: dict[str, dict[str, dict]]) -> None:
    """Append one run's measurements (per section, per loop or page: queries, cpu_s) as a
    line of JSON."""
    with path.open("a") as out:
        out.write(json.dumps(measured, sort_keys=True) + "\n")


def over(measured: dict[str, dict[str, dict]], limits: dict | None = None) -> dict[str, str]:
    """The loops and pages (`section/name`) past their threshold at 128 GPUs, and by what."""
    limits = limits or json.loads(PATH.read_text())
    found = {}
    for section in SECTIONS:
        for name, seen in sorted(measured.get(section, {}).items()):
            limit, key = limits.get(section, {}).get(name), f"{section}/{name}"
            if limit is None:
                found[key] = "no threshold: recalibrate (tests/bench/scale_thresholds.py)"
            elif seen["queries"] > limit["queries"]:
                found[key] = f"{seen['queries']} queries > {limit['queries']}"
            elif seen["cpu_s"] > limit["cpu_s"]:
                found[key] = f"{seen['cpu_s']:.3f} CPU s > {limit['cpu_s']}"
    return found


def text(thresholds: dict) -> str:
    """The thresholds file's text: a loop or page a line, so that a recalibration's diff
    reads."""
    head = {k: v for k, v in thresholds.items() if k not in SECTIONS}
    lines = [json.dumps(head, indent=2)[:-2] + ","]
    for s, section in enumerate(SECTIONS):
        lines.append(f"  {json.dumps(section)}: {{")
        limits = sorted(thresholds[section].items())
        for n, (name, limit) in enumerate(limits):
            comma = "," if n < len(limits) - 1 else ""
            lines.append(f"    {json.dumps(name)}: {json.dumps(limit)}{comma}")
        lines.append("  }," if s < len(SECTIONS) - 1 else "  }")
    return "\n".join([*lines, "}", ""])


def _threshold(runs: list[dict], previous: dict | None) -> dict:
    """One loop's or page's threshold from its runs, at least its previous one's."""
    queries = [run["queries"] for run in runs]
    cpu = [run["cpu_s"] for run in runs]
    limit = {
        "queries": max(queries) + max(QUERY_SLACK, math.ceil(max(queries) * QUERY_MARGIN)),
        "cpu_s": round(max(CPU_FACTOR * max(cpu), max(cpu) + CPU_SLACK_S), 3),
    }
    if previous:
        limit = {key: max(value, previous[key]) for key, value in limit.items()}
    return {**limit, "seen": {
        "queries": sorted(set(queries)),
        "cpu_s_mean": round(statistics.mean(cpu), 4),
        "cpu_s_stdev": round(statistics.pstdev(cpu), 4),
        "cpu_s_max": round(max(cpu), 4),
    }}


def calibrate(runs: list[dict[str, dict[str, dict]]], *, note: str,
              previous: dict | None = None) -> dict:
    """The thresholds file from several runs' measurements, each threshold at least the
    `previous` file's."""
    previous = previous or {}
    sections = {section: {
        name: _threshold([run[section][name] for run in runs],
                         previous.get(section, {}).get(name))
        for name in sorted(runs[0][section])} for section in SECTIONS}
    return {
        "calibrated": note,
        "runs": len(runs),
        "margin": (
            f"queries: the most seen + {QUERY_MARGIN:.0%} (at least {QUERY_SLACK}); CPU "
            f"(worker + PostgreSQL backend): {CPU_FACTOR:g} x the most seen, at least + "
            f"{CPU_SLACK_S} s; each at least the previous calibration's"
        ),
        **sections,
    }
