"""What usage adds to the pages of others (`gpuquota.core.contributions`): failed GPUs and
silent nodes, on the admin's home page."""

from gpuquota.usage.attention import fleet_attention

ATTENTION = [fleet_attention]
