"""What reclaim adds to the pages and metrics of the apps below it
(`gpuquota.core.contributions`): the team page's banner and reclaim history, the fleet
page's reclaim figures, reclaim's Prometheus gauges, and the objections and open
recommendations on the admin's home page."""

from datetime import datetime

from gpuquota.core.sections import Section
from reclaim.attention import reclaim_attention
from reclaim.metrics import ReclaimCollector
from reclaim.selectors import reclaim_figures
from reclaim.selectors_pages import team_reclaim_context


def fleet_reclaim_context(*, now: datetime) -> dict:
    return {"reclaim": reclaim_figures(now=now)}


PAGE_SECTIONS = [
    Section(page="team", slot="top", template="reclaim/_team_banner.html",
            context=team_reclaim_context, order=20),
    Section(page="team", slot="main", template="reclaim/_team_audit.html",
            context=team_reclaim_context, order=20),
    Section(page="fleet", slot="figures", template="reclaim/_fleet_figures.html",
            context=fleet_reclaim_context, order=20),
]

METRICS_COLLECTORS = [ReclaimCollector()]

ATTENTION = [reclaim_attention]
