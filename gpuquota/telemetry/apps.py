from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "gpuquota.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry import (dcgm-exporter, Prometheus)"
