"""What usage adds to the pages of others (`gpuquota.core.contributions`): a team's
reserved versus busy figures for the month, on the team page; failed GPUs and silent
nodes, on the admin's home page."""

from gpuquota.core.sections import Section
from gpuquota.usage.attention import fleet_attention
from gpuquota.usage.history import team_month_context

PAGE_SECTIONS = [
    Section(page="team", slot="main", template="usage/_reservation_utilization.html",
            context=team_month_context, order=5),  # first: right after the reservations
]
ATTENTION = [fleet_attention]
