import secrets
import threading

from django.core.management.base import BaseCommand, CommandError

from gpuquota.inventory.models import Cluster
from gpuquota.schedulers.kubernetes.fake_apiserver import FakeApiServer
from gpuquota.schedulers.reconcile import cluster_reconcile
from gpuquota.schedulers.services import backend_config_update


class Command(BaseCommand):
    help = ("Run the fake Kubernetes API server on loopback (with Kueue, admission and DRA "
            "kinds) until Ctrl-C. With --cluster, point that Kubernetes cluster's backend at "
            "it and reconcile once: the demo's `turing` shows its bindings and objects at "
            "/kubernetes/turing/. Nothing leaves the process: a development and demo aid.")

    def add_arguments(self, parser):
        parser.add_argument("--cluster", help="slug of a Kubernetes cluster to configure")
        parser.add_argument("--exact-gpus", action="store_true",
                            help="also serve DRA with the NVIDIA driver and use the DRA mode")
        parser.add_argument("--once", action="store_true",
                            help="reconcile once and stop (the server stops with it)")

    def handle(self, *args, cluster, exact_gpus, once, **options):
        token = secrets.token_urlsafe(24)
        server = FakeApiServer(token=token).start()
        self.stdout.write(f"Fake Kubernetes API at {server.url} (token {token[:6]}…)")
        try:
            if cluster:
                self._configure(server, cluster, exact_gpus=exact_gpus)
            if not once:
                threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()

    def _configure(self, server: FakeApiServer, slug: str, *, exact_gpus: bool) -> None:
        found = Cluster.objects.filter(slug=slug, scheduler=Cluster.Scheduler.KUBERNETES).first()
        if found is None:
            raise CommandError(f"No Kubernetes cluster {slug!r}.")
        if exact_gpus:
            for node in found.nodes.all():
                server.put({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                            "metadata": {"name": f"{node.hostname}-gpu.nvidia.com"},
                            "spec": {"driver": "gpu.nvidia.com", "nodeName": node.hostname,
                                     "pool": {"name": node.hostname, "generation": 1,
                                              "resourceSliceCount": 1}, "devices": []}})
        backend_config_update(cluster=found, actor=None, token=server.token,
                              api_url=server.url, options={"exact_gpus": exact_gpus})
        # Saving the configuration already asked for a run (in process without a broker).
        summary = cluster_reconcile(cluster=found, reason="fake API server")
        self.stdout.write(f"{found.slug}: {summary.outcome}, {len(server.writes())} write(s)"
                          + (f": {summary.error}" if summary.error else ""))
        for request in server.writes():
            self.stdout.write(f"  {request.method} {request.path}")
