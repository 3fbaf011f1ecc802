from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "gpuquota.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry import (dcgm-exporter, Prometheus)"

    def ready(self):
        from gpuquota.telemetry.netguard import allowed_networks

        allowed_networks()  # a bad TELEMETRY_ALLOWED_NETWORKS stops the start, named
