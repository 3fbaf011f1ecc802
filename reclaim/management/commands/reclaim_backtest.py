"""`manage.py reclaim_backtest [--days N] [--lookback-hours H] [--grace-hours H]`: every
reclaim rule over the last N days of this site's own history, one line per rule that
scripts can read (docs/reclaim.md, "Policy backtest")."""

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from gpuquota.core.errors import DomainError
from reclaim.backtest import MAX_DAYS, rules_backtest
from reclaim.conf import policy


class Command(BaseCommand):
    help = "Backtest every reclaim rule on the site's history: each rule's false share."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=30, help=f"1 to {MAX_DAYS} (30)")
        parser.add_argument("--lookback-hours", type=int, help="the policy's if not given")
        parser.add_argument("--grace-hours", type=int, help="the policy's if not given")

    def handle(self, *args, days, lookback_hours, grace_hours, **options):
        def hours(value: int | None) -> timedelta | None:
            return None if value is None else timedelta(hours=value)

        tuned = policy().override(lookback=hours(lookback_hours), grace=hours(grace_hours))
        try:
            results = rules_backtest(policy=tuned, days=days)
        except DomainError as exc:
            where = f"--{exc.field.replace('_', '-')}: " if exc.field else ""
            raise CommandError(f"{where}{exc.message}") from exc
        for rule, result in results.items():
            in_force = " (in force)" if rule == tuned.rule else ""
            self.stdout.write(
                f"RULE rule={rule} recommendations={len(result.recommendations)} "
                f"gpus_released={result.gpus_released} false_reclaims={result.false_reclaims} "
                f"false_share={result.false_reclaim_rate * 100:.1f} "
                f"gpu_hours_returned={result.gpu_hours_returned:.1f}{in_force}")
