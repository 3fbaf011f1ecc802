from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from gpuquota.ingest.batches import batch_ingest
from gpuquota.ingest.protocol import ProtocolError, batch_check, gzip_file_decode
from gpuquota.ingest.selectors import node_for_token
from gpuquota.inventory.models import Node


class Command(BaseCommand):
    help = ("Import batches in the agent protocol's format from files (JSON or gzip JSON; a "
            "rescued spool, a migration from another system), with the endpoint's validation "
            "except the 8-day age bound. Admin-only: this command writes any node's data "
            "without a network token check; run it on the server as an administrator.")

    def add_arguments(self, parser):
        parser.add_argument("files", nargs="+", type=Path)
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("--node-token-file", type=Path, help="file holding the node's token")
        who.add_argument("--cluster", help="cluster slug (with --hostname)")
        parser.add_argument("--hostname")

    def _node(self, options) -> Node:
        if options["node_token_file"]:
            node = node_for_token(key=options["node_token_file"].read_text().strip())
            if node is None:
                raise CommandError("The token in --node-token-file is unknown or revoked.")
            return node
        if not options["hostname"]:
            raise CommandError("--cluster needs --hostname.")
        node = Node.objects.filter(cluster__slug=options["cluster"],
                                   hostname=options["hostname"]).first()
        if node is None:
            raise CommandError(f"No node {options['cluster']}/{options['hostname']}.")
        return node

    def handle(self, *args, files, **options):
        node = self._node(options)
        failed = 0
        for path in files:
            try:
                body = batch_check(gzip_file_decode(path.read_bytes()))
            except (OSError, ValueError, ProtocolError) as exc:
                failed += 1
                detail = exc.body() if isinstance(exc, ProtocolError) else str(exc)
                self.stderr.write(f"{path}: refused: {detail}")
                continue
            result = batch_ingest(node=node, body=body, now=timezone.now().replace(microsecond=0),
                                  check_age=False)
            counts = " ".join(f"{kind}={result.body[kind]}" for kind in
                              ("samples", "processes", "events"))
            state = "already imported" if result.status == 200 else "imported"
            self.stdout.write(f"{path}: {state} {counts} rejected={len(result.body['rejected'])} "
                              f"nulled={len(result.body['nulled'])}")
        if failed:
            raise CommandError(f"{failed} of {len(files)} file(s) refused")
