from django.core.management.base import BaseCommand, CommandError

from gpuquota.core.errors import DomainError
from gpuquota.ingest.bootstrap import bootstrap_secret_revoke, bootstrap_secret_rotate
from gpuquota.ingest.services import cluster_ensure


class Command(BaseCommand):
    help = ("Print a new bootstrap secret for a cluster's agents on the last line (creating the "
            "cluster if needed); the one it had stops enrolling. With --revoke, revoke it only. "
            "Admin-only: run it on the server.")

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True, help="cluster name or slug")
        parser.add_argument("--revoke", action="store_true")

    def handle(self, *args, cluster, revoke, **options):
        try:
            found = cluster_ensure(name=cluster)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        if revoke:
            self.stderr.write(f"Revoked {bootstrap_secret_revoke(cluster=found, actor=None)} "
                              f"bootstrap secret(s) of {found}.")
            return
        issued = bootstrap_secret_rotate(cluster=found, actor=None)
        self.stderr.write(f"New bootstrap secret for {found}; any earlier one is revoked.")
        self.stdout.write(issued.key)
