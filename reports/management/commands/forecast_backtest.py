"""`manage.py forecast_backtest --month YYYY-MM`: forecast each team's month end as of every
midnight of a past month and print the error by day of month (docs/budgets.md)."""

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from gpuquota.core.timeutil import Period
from reports.forecast_backtest import forecast_backtest


class Command(BaseCommand):
    help = "Backtest the month-end forecast on a past month: the error by day of month."

    def add_arguments(self, parser):
        parser.add_argument("--month", required=True, help="YYYY-MM (UTC), a month that has ended")
        parser.add_argument("--all-booked", action="store_true",
                            help="count every reservation of the month as booked from its first "
                                 "day (for back-filled data, such as the demo's)")

    def handle(self, *args, month, all_booked, **options):
        try:
            period = Period.parse_month(month)
        except ValueError as exc:
            raise CommandError(f"--month: {exc}") from exc
        if period.end > timezone.now():
            raise CommandError("--month: the month has not ended yet")
        actual, days = forecast_backtest(month=period, all_booked=all_booked)
        self.stdout.write(f"{len(actual)} team(s) with a non-zero month, total "
                          f"{sum(actual.values())}")
        self.stdout.write("day  teams  mean |error|  max |error|")
        for row in days:
            self.stdout.write(f"{row.day:>3}  {row.teams:>5}  {float(row.mean_abs_error):>11.2%}"
                              f"  {float(row.max_abs_error):>10.2%}")
        late = [row for row in days if row.day >= 10]
        if late:
            worst = max(row.mean_abs_error for row in late)
            mean = sum(row.mean_abs_error for row in late) / len(late)
            team = max(row.max_abs_error for row in late)
            self.stdout.write(f"RESULT forecast_mean_abs_error_from_day_10_max={float(worst):.4f}"
                              f" forecast_mean_abs_error_from_day_10_mean={float(mean):.4f}"
                              f" forecast_team_abs_error_from_day_10_max={float(team):.4f}")
