"""Import a past range of a telemetry source (a back-fill): its whole windows in
[--from, --to), in chunks of at most 11,000 points per series. Running it again stores
nothing twice. The source's cursor (what beat pulls from) is left alone."""

from django.core.management.base import BaseCommand, CommandError

from gpuquota.ingest.parsing import instant_parse
from gpuquota.telemetry.errors import SourceError
from gpuquota.telemetry.importer import range_import
from gpuquota.telemetry.models import TelemetrySource


class Command(BaseCommand):
    help = "Import a past range of a telemetry source (dcgm-exporter via Prometheus)."

    def add_arguments(self, parser):
        parser.add_argument("--source", required=True, help="The source's name.")
        parser.add_argument("--from", dest="start", required=True,
                            help="ISO 8601 instant with a time zone, e.g. 2026-12-01T00:00Z")
        parser.add_argument("--to", dest="end", required=True, help="ISO 8601 instant (excluded)")

    def handle(self, *args, source, start, end, **options):
        found = TelemetrySource.objects.filter(name=source).first()
        if found is None:
            raise CommandError(f"No telemetry source named {source!r}.")
        begin, finish = instant_parse(start.replace("Z", "+00:00")), instant_parse(
            end.replace("Z", "+00:00"))
        if begin is None or finish is None:
            raise CommandError("--from and --to must be ISO 8601 instants with a time zone.")
        if finish <= begin:
            raise CommandError("--to must be after --from.")
        try:
            result = range_import(source=found, start=begin, end=finish)
        except SourceError as exc:
            raise CommandError(f"{found.name}: {exc.reason}") from exc
        samples = result.counts["samples"]
        self.stdout.write(
            f"{found.name}: {result.windows} windows, {result.gpus} GPU reports; samples "
            f"{samples['stored']} stored, {samples['duplicates']} already there, "
            f"{samples['conflicts']} conflicting; events {result.counts['events']['stored']} "
            f"stored; {result.rejected} records rejected; {result.skipped_series} series "
            f"without a GPU UUID skipped; {result.replayed_batches} batches imported before.")
