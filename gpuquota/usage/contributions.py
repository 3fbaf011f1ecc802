"""What usage adds to other apps (`gpuquota.core.contributions`): a team's reserved versus
busy figures for the month, on the team page; failed GPUs and silent nodes, on the admin's
home page; whether its rollups past the raw-data horizon refuse a change of past hours,
and their re-pricing when a rate card changes."""

from gpuquota.core.sections import Section
from gpuquota.usage.attention import fleet_attention
from gpuquota.usage.history import team_month_context
from gpuquota.usage.selectors import rollups_past_horizon
from gpuquota.usage.services import gpu_class_hours_reprice

PAGE_SECTIONS = [
    Section(page="team", slot="main", template="usage/_reservation_utilization.html",
            context=team_month_context, order=5),  # first: right after the reservations
]
ATTENTION = [fleet_attention]
RECOMPUTE_HORIZON = [rollups_past_horizon]
RATE_CARD_CHANGED = [gpu_class_hours_reprice]
