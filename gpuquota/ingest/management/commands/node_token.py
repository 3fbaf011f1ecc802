from django.core.management.base import BaseCommand, CommandError

from gpuquota.core.errors import DomainError
from gpuquota.ingest.services import cluster_ensure, node_enrol, node_token_rotate
from gpuquota.inventory.models import Node


class Command(BaseCommand):
    help = ("Enrol a node (creating its cluster if needed) and print a new node token on the "
            "last line. For a node already enrolled, the token is rotated: the old one stops "
            "working. Admin-only: run it on the server.")

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True, help="cluster name or slug")
        parser.add_argument("--hostname", required=True)

    def handle(self, *args, cluster, hostname, **options):
        try:
            found = cluster_ensure(name=cluster)
            node = Node.objects.filter(cluster=found, hostname=hostname.strip()).first()
            if node is None:
                issued = node_enrol(cluster=found, hostname=hostname, actor=None)
                self.stderr.write(f"Enrolled {issued.node}.")
            else:
                issued = node_token_rotate(node=node, actor=None)
                self.stderr.write(f"{node} was enrolled already: its previous token is revoked.")
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(issued.key)
