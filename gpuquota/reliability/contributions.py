"""What reliability adds to the apps below it: its gauges on /metrics."""

from gpuquota.reliability.held import drained_spans
from gpuquota.reliability.metrics import ReliabilityCollector

METRICS_COLLECTORS = [ReliabilityCollector()]

#: capacity leaves drained GPUs out (docs/reliability.md#what-a-drain-keeps-out)
GPUS_HELD_OUT = [drained_spans]
