"""`manage.py telemetry_demo`: the demo (`manage.py demo`) with one cluster reporting
through the Prometheus importer instead of gpuquota's agent: fake dcgm-exporters for its
GPUs, Debian's Prometheus scraping them every 5 s, and a source `<cluster>-prometheus`
that beat pulls. Run `seed_demo` first (`make demo-telemetry` does)."""

import os
from datetime import timedelta

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from gpuquota.inventory.models import Cluster
from gpuquota.telemetry.demo import SCRAPE_INTERVAL_S, Exporters, PrometheusProcess, demo_gpus
from gpuquota.telemetry.models import TelemetrySource
from gpuquota.telemetry.services import source_save


class Command(BaseCommand):
    help = "Run the demo with one cluster's GPUs reporting through dcgm-exporter and Prometheus."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", default="turing", help="the demo cluster's slug")
        parser.add_argument("--addr", default="127.0.0.1:8000", help="host:port to serve on")

    def handle(self, *args, cluster, addr, **options):
        found = Cluster.objects.filter(slug=cluster).first()
        if found is None:
            raise CommandError(f"No cluster {cluster!r}: run `manage.py seed_demo` first.")
        # The demo's exporters and Prometheus listen on loopback, which sources reach only
        # where the site allows it: this process and the demo's own allow their loopback.
        allowed = os.environ.get("TELEMETRY_ALLOWED_NETWORKS", "")
        if "127.0.0.1/32" not in allowed.split(","):
            os.environ["TELEMETRY_ALLOWED_NETWORKS"] = ",".join(
                filter(None, [allowed, "127.0.0.1/32"]))
        gpus = demo_gpus(cluster=found)
        exporters = Exporters(gpus)
        try:
            prometheus = PrometheusProcess(exporters.targets)
        except RuntimeError as exc:
            exporters.stop()
            raise CommandError(str(exc)) from exc
        try:
            name = f"{found.slug}-prometheus"
            source = TelemetrySource.objects.filter(name=name).first() or TelemetrySource(
                name=name, cluster=found, kind="prometheus")
            source.base_url, source.window_s, source.interval_s = prometheus.url, 10, 10
            source.scrape_interval_s, source.delay_s = SCRAPE_INTERVAL_S, 2 * SCRAPE_INTERVAL_S
            source.cursor = timezone.now().replace(microsecond=0) - timedelta(seconds=30)
            source_save(source=source, secret=None, actor=None)
            self.stdout.write(f"{len(gpus)} GPUs of {found.name} served by "
                              f"{len(exporters.targets)} fake dcgm-exporters, scraped by "
                              f"Prometheus at {prometheus.url}; source {name} imports them.")
            call_command("demo", addr=addr, no_agents_in=[found.slug])
        finally:
            prometheus.stop()
            exporters.stop()
