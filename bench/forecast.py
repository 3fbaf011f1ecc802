"""Forecast backtest on the project's simulated month: October 2026 as `bench.statements`
fills it (reservations in two halves of the month, a quarter of the unreserved GPUs busy
on demand for a team by an hourly pattern, 1 % of the GPUs failed for five hours), then
`forecast_backtest` over it, both strict (reservations known from their `requested_at`,
which the fill sets to their start) and with `--all-booked`.

    .venv/bin/python -m bench.forecast [--gpus 300] [--teams 12]

It creates (drops first) its own PostgreSQL database (`BENCH_DATABASE`, default
gpuquota_bench_forecast). It is not a test."""

import argparse
import os
import sys

from bench.statements import ROOT, fill

DATABASE = os.environ.get("BENCH_DATABASE", "gpuquota_bench_forecast")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=300)
    parser.add_argument("--teams", type=int, default=12)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.simdb import django_on_fresh_database

    os.environ["BENCH_DATABASE"] = DATABASE
    django_on_fresh_database(DATABASE)
    print(f"fill: {fill(args.gpus, args.teams):.1f} s ({args.gpus} GPUs, {args.teams} teams)")
    from django.core.management import call_command

    for extra in ([], ["--all-booked"]):
        print(f"forecast_backtest --month 2026-10 {' '.join(extra)}", flush=True)
        call_command("forecast_backtest", "--month", "2026-10", *extra)


if __name__ == "__main__":
    main()
