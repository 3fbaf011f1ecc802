"""What reliability adds to the apps below it: its gauges on /metrics."""

from gpuquota.reliability.metrics import ReliabilityCollector

METRICS_COLLECTORS = [ReliabilityCollector()]
