"""What reliability adds to the apps below it: its gauges on /metrics, its section on
each GPU's and node's page, the drained GPUs kept out of capacity and, where drained
alone, in the schedulers' plans."""

from gpuquota.core.sections import Section
from gpuquota.reliability.held import drained_spans, gpus_drained_alone
from gpuquota.reliability.metrics import ReliabilityCollector
from gpuquota.reliability.unit import gpu_reliability, node_reliability

METRICS_COLLECTORS = [ReliabilityCollector()]

#: capacity leaves drained GPUs out (docs/reliability.md#what-a-drain-keeps-out)
GPUS_HELD_OUT = [drained_spans]

#: the scheduler backends keep each GPU drained alone in their plan (a DRA DeviceTaintRule)
GPUS_DRAINED = [gpus_drained_alone]

PAGE_SECTIONS = [
    Section(page="gpu", slot="main", template="reliability/_unit_section.html",
            context=gpu_reliability),
    Section(page="node", slot="main", template="reliability/_unit_section.html",
            context=node_reliability),
]
