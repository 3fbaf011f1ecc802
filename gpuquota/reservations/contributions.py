"""What reservations adds to the pages of others (`gpuquota.core.contributions`): the
requests waiting for approval, on the admin's home page."""

from gpuquota.reservations.attention import approvals_attention

ATTENTION = [approvals_attention]
