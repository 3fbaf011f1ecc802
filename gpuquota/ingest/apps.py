from django.apps import AppConfig


class IngestConfig(AppConfig):
    name = "gpuquota.ingest"
    label = "ingest"
    verbose_name = "Telemetry ingestion"
