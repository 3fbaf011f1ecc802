"""Prometheus gauges of reliability, read from the latest figures snapshot at each scrape
(contributed to `/metrics`)."""

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from gpuquota.reliability.snapshot import reliability_figures_latest


class ReliabilityCollector:
    """Per class over the last 90 days: failures, GPU-days, the rate per 1,000 GPU-days and
    its 95% interval, availability; drift flags; lemons flagged now."""

    def collect(self):
        snapshot = reliability_figures_latest(now=timezone.now().replace(microsecond=0))
        labels = ["gpu_class"]
        families = {
            "failures": GaugeMetricFamily("gpuquota_gpu_failures_90d",
                                          "Hardware failures in the last 90 days", labels=labels),
            "rate": GaugeMetricFamily("gpuquota_gpu_failures_per_1000_gpu_days",
                                      "Failures per 1,000 GPU-days, last 90 days",
                                      labels=[*labels, "bound"]),
            "availability": GaugeMetricFamily("gpuquota_gpu_availability_ratio",
                                              "Share of service time not failed, last 90 days",
                                              labels=labels),
        }
        for figures in snapshot.classes:
            key = [figures["key"]]
            families["failures"].add_metric(key, figures["failures"])
            if figures["failures_per_1000_gpu_days"] is not None:
                families["rate"].add_metric([*key, "estimate"],
                                            figures["failures_per_1000_gpu_days"])
                families["rate"].add_metric([*key, "ci95_low"], figures["ci95_low"])
                families["rate"].add_metric([*key, "ci95_high"], figures["ci95_high"])
            if figures["availability"] is not None:
                families["availability"].add_metric(key, figures["availability"])
        yield from families.values()
        lemons = GaugeMetricFamily("gpuquota_lemons_flagged", "GPUs and nodes flagged as lemons",
                                   labels=["kind"])
        lemons.add_metric(["gpu"], len(snapshot.gpu_lemons))
        lemons.add_metric(["node"], len(snapshot.node_lemons))
        yield lemons
        yield GaugeMetricFamily("gpuquota_reliability_figures_as_of_timestamp_seconds",
                                "The instant the reliability figures were computed as of",
                                value=snapshot.as_of.timestamp())
        yield GaugeMetricFamily("gpuquota_reliability_drift_flags",
                                "Classes and nodes whose failure rate drifted up",
                                value=len(snapshot.drift))
