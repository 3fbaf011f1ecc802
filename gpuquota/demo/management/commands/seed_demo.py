import time
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from gpuquota.core.contributions import contributed
from gpuquota.demo.history import DEFAULT_HISTORY_HOURS, demo_history_backfill
from gpuquota.demo.last_month import demo_last_month_seed
from gpuquota.demo.organisation import DEMO_PASSWORD, demo_organisation_seed
from gpuquota.demo.reclaim import demo_reclaim_seed
from gpuquota.demo.reservations import demo_reservations_seed


class Command(BaseCommand):
    help = ("Create the demo organisation (clusters, nodes, GPUs, teams, quotas, rates) and "
            "back-fill recent simulated telemetry. Idempotent.")

    def add_arguments(self, parser):
        parser.add_argument(
            "--history-hours", type=int, default=DEFAULT_HISTORY_HOURS,
            help="hours before now to back-fill with simulated telemetry, where the demo "
            f"nodes have none yet (default {DEFAULT_HISTORY_HOURS}; 0: none)",
        )

    def handle(self, *args, history_hours, **options):
        if history_hours < 0:
            raise CommandError("--history-hours must be 0 or more.")
        now = timezone.now()
        logins = demo_organisation_seed()
        demo_reservations_seed(now=now)
        began = time.monotonic()
        # every reserved GPU's telemetry up to where the back-filled history begins
        demo_last_month_seed(now=now, until=now - timedelta(hours=history_hours))
        # what the apps built on the domain apps seed (reports: last month's drafts)
        seeded = [seed(now=now) for seed in contributed("DEMO_SEEDS")]
        last_month_s = time.monotonic() - began
        demo_reclaim_seed(now=now)
        self.stdout.write(
            self.style.SUCCESS(f"Demo organisation ready. Logins (password: {DEMO_PASSWORD}):")
        )
        for team, usernames in logins.items():
            self.stdout.write(f"  {team:<10} {', '.join(usernames)}")
        for line in filter(None, seeded):
            self.stdout.write(line)
        self.stdout.write(f"Last month seeded in {last_month_s:.1f} s (its telemetry rolled up "
                          "and drafted).")
        if history_hours:
            self.stdout.write(f"Back-filling up to {history_hours} h of simulated telemetry...")
            began = time.monotonic()
            samples = demo_history_backfill(hours=history_hours, now=now)
            self.stdout.write(
                f"Demo history: {samples} samples stored in {time.monotonic() - began:.1f} s."
            )
