"""`manage.py carbon_intensity_import CLUSTER FILE.csv --source TEXT`: a cluster's hourly
carbon intensity (g CO2e/kWh) from a CSV (docs/accounting.md, Energy)."""

from django.core.management.base import BaseCommand, CommandError

from gpuquota.core.errors import DomainError
from gpuquota.inventory.models import Cluster
from gpuquota.rates.energy import carbon_intensity_import, carbon_intensity_parse


class Command(BaseCommand):
    help = "Import a cluster's hourly carbon intensity (g CO2e/kWh) from a CSV."

    def add_arguments(self, parser):
        parser.add_argument("cluster", help="The cluster's slug.")
        parser.add_argument("file", help="The CSV: a time column and an intensity column.")
        parser.add_argument("--source", required=True,
                            help="Where the figures come from (printed on statements).")

    def handle(self, *args, cluster, file, source, **options):
        found = Cluster.objects.filter(slug=cluster).first()
        if found is None:
            raise CommandError(f"No cluster {cluster!r}.")
        try:
            with open(file, encoding="utf-8-sig") as handle:
                text = handle.read()
        except OSError as error:
            raise CommandError(f"{file}: {error.strerror}") from None
        try:
            rows = carbon_intensity_parse(text)
            count = carbon_intensity_import(cluster=found, rows=rows, source=source)
        except DomainError as error:
            raise CommandError(f"{file}: {error.message}") from None
        self.stdout.write(f"{count} hours of carbon intensity imported for {found.slug}.")
