"""`manage.py demo_sso`: the demo (`manage.py demo`) with a loopback OpenID Connect
provider beside it (`make demo SSO=1`)."""

from django.core.management import call_command
from django.core.management.base import BaseCommand

from accounts.sso.demo import DEMO_USERS, demo_provider_running, demo_rules_seed


class Command(BaseCommand):
    help = "Run the demo with a loopback OpenID Connect provider whose users log in to it."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000", help="host:port to serve on")
        parser.add_argument("--provider-port", type=int, default=8900,
                            help="the provider's port on 127.0.0.1")

    def handle(self, *args, addr, provider_port, **options):
        demo_rules_seed()
        with demo_provider_running(port=provider_port) as issuer:
            self.stdout.write(f"OpenID Connect provider on {issuer}: log in with “Demo SSO” "
                              f"as {' or '.join(DEMO_USERS)} (docs/sso.md)")
            call_command("demo", addr=addr)
