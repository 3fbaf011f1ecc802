from django.core.management.base import BaseCommand
from django.utils import timezone

from gpuquota.core.demo import DEMO_PASSWORD, demo_organisation_seed
from gpuquota.reservations.demo import demo_reservations_seed


class Command(BaseCommand):
    help = "Create the demo organisation (clusters, nodes, GPUs, teams, quotas, rates). Idempotent."

    def handle(self, *args, **options):
        logins = demo_organisation_seed()
        demo_reservations_seed(now=timezone.now())
        self.stdout.write(
            self.style.SUCCESS(f"Demo organisation ready. Logins (password: {DEMO_PASSWORD}):")
        )
        for team, usernames in logins.items():
            self.stdout.write(f"  {team:<10} {', '.join(usernames)}")
