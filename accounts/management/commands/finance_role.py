"""Grant or take back the read-only finance role (docs/chargeback.md, The finance role)."""

from django.core.management.base import BaseCommand, CommandError

from accounts.models import User
from accounts.services import finance_role_set


class Command(BaseCommand):
    help = "Grant (or with --revoke take back) the read-only finance role of a user."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--revoke", action="store_true")

    def handle(self, *args, username: str, revoke: bool, **options):
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}.")
        finance_role_set(user=user, on=not revoke)
        self.stdout.write(f"{username}: finance {'off' if revoke else 'on'}.")
