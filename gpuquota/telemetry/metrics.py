"""What the telemetry importer adds to /metrics: per source, its import lag, whether its
last pull failed, and the GPUs it reports."""

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from gpuquota.telemetry.selectors import sources_status


class TelemetryCollector:
    def collect(self):
        lag = GaugeMetricFamily("gpuquota_telemetry_import_lag_seconds",
                                "Now minus the end of the last window a source imported",
                                labels=["source", "cluster"])
        up = GaugeMetricFamily("gpuquota_telemetry_source_up",
                               "1 when the source's last pull succeeded, 0 when it failed",
                               labels=["source", "cluster"])
        gpus = GaugeMetricFamily("gpuquota_telemetry_source_gpus", "GPUs a source reports",
                                 labels=["source", "cluster"])
        for status in sources_status(now=timezone.now()):
            labels = [status.source.name, status.source.cluster.slug]
            if status.lag_s is not None:
                lag.add_metric(labels, status.lag_s)
            up.add_metric(labels, 0 if status.failing else 1)
            gpus.add_metric(labels, status.gpus)
        yield lag
        yield up
        yield gpus
