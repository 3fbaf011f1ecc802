"""Carbon benchmark: what facility energy and CO2e add to drafting a month's statements.

    .venv/bin/python -m bench.carbon [--gpus 2000] [--teams 40]

It fills its own database as `bench.statements` does (`BENCH_DATABASE`, default
gpuquota_bench_carbon; one cluster), gives every rollup row an energy (350 W over its
covered seconds), then times, in the same run, `statements_draft_month` and the carbon
read alone (`reports.carbon.carbon_by_team`, all teams) beside the energy-only read drafting
made before (`reports.energy.energy_by_team`), in three set-ups:
1. no factor (the site configured none): read per GPU;
2. one factor over the month: read per GPU;
3. the same factor and an imported hourly intensity for each of the month's 744 hours:
   read per cluster and hour.
It prints RESULT lines. It is not a test.
"""

import argparse
import os
import sys
import time
from datetime import timedelta
from decimal import Decimal

os.environ.setdefault("BENCH_DATABASE", "gpuquota_bench_carbon")

from bench import statements as base  # noqa: E402 (reads BENCH_DATABASE)


def setup() -> None:
    base.database_create()
    os.environ.update(DATABASE_URL=f"{base.PG}/{base.DATABASE}", REDIS_URL="", DEBUG="1",
                      SECRET_KEY="bench-only-secret-key-not-for-production-use-0123456789",
                      SECURE_SSL_REDIRECT="0", ALLOWED_HOSTS="*", GPUQUOTA_MAIL_ENABLED="0",
                      LOG_LEVEL="WARNING")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    sys.path.insert(0, str(base.ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def measure(label: str) -> None:
    from gpuquota.core.timeutil import Period
    from reports.carbon import carbon_by_team
    from reports.energy import energy_by_team

    period = Period.month(2026, 10)
    from accounts.models import Team

    team_ids = list(Team.objects.values_list("id", flat=True))
    began = time.perf_counter()
    energy_by_team(period=period, team_ids=team_ids)
    energy_s = time.perf_counter() - began
    began = time.perf_counter()
    carbon = carbon_by_team(period=period, team_ids=team_ids)
    read_s = time.perf_counter() - began
    draft_s, statements = base.draft()
    print(f"RESULT carbon {label}: carbon read {read_s:.2f} s ({len(carbon)} teams) | "
          f"energy-only read (the read drafting made before) {energy_s:.2f} s | draft "
          f"{statements} statements {draft_s:.2f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=2000)
    parser.add_argument("--teams", type=int, default=40)
    args = parser.parse_args()
    setup()
    print(f"fill: {base.fill(args.gpus, args.teams):.1f} s", flush=True)
    from django.db import connection

    from gpuquota.inventory.models import Cluster
    from gpuquota.rates.models import CarbonIntensityHour, ClusterEnergyFactor

    with connection.cursor() as cursor:
        cursor.execute("UPDATE usage_gpuhourusage SET energy_j = covered_s * 350.0")
        cursor.execute("SELECT count(*) FROM usage_gpuhourusage")
        print(f"{cursor.fetchone()[0]} rollup rows", flush=True)
    measure("no factor")
    cluster = Cluster.objects.get()
    start = base.NOW.replace(month=10, day=1)
    ClusterEnergyFactor.objects.create(cluster=cluster, valid_from=start, pue=Decimal("1.3"),
                                       carbon_intensity=Decimal("350"), source="bench")
    measure("one factor")
    CarbonIntensityHour.objects.bulk_create([
        CarbonIntensityHour(cluster=cluster, hour=start + timedelta(hours=h),
                            carbon_intensity=Decimal(200 + h % 200), source="bench")
        for h in range(744)])
    measure("hourly intensity")


if __name__ == "__main__":
    main()
