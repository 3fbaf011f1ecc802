"""Recalibrate the CI scale check's thresholds (tests/bench/scale_thresholds.py):

    .venv/bin/python -m tests.bench.fleet_scale_calibrate [--runs 5] [--write]

runs `tests/bench/test_fleet_scale.py` `--runs` times, one after the other (PostgreSQL and
the test settings as for any test run: DATABASE_URL), each recording what it measured, and
prints the thresholds file computed from them, each threshold the larger of the runs' and
the file's before (`--write`: replaces tests/bench/fleet_scale_thresholds.json). Say in the
commit what changed and the load."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from tests.bench.scale_thresholds import PATH, RECORD_ENV, calibrate, text

TEST = "tests/bench/test_fleet_scale.py"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    loads = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.jsonl"
        for n in range(args.runs):
            loads.append(os.getloadavg()[0])
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-n0",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "--durations=2",
                    TEST,
                ],
                env={**os.environ, RECORD_ENV: str(path)},
                check=False,
            )
            if done.returncode != 0:
                raise SystemExit(f"run {n + 1} failed: fix the check before calibrating")
        runs = [json.loads(line) for line in path.read_text().splitlines()]
    note = (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {len(runs)} runs, {os.cpu_count()} CPUs, "
        f"load average {min(loads):.1f}-{max(loads):.1f}"
    )
    previous = json.loads(PATH.read_text()) if PATH.exists() else None
    if previous:  # the instants of the calibrations before, newest first
        before = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", previous["calibrated"])
        note += f"; each threshold at least that of the calibrations before ({', '.join(before)})"
    found = text(calibrate(runs, note=note, previous=previous))
    if args.write:
        PATH.write_text(found)
    print(found)


if __name__ == "__main__":
    main()
