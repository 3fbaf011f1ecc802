"""What lending adds to the pages and metrics of the apps below it
(`gpuquota.core.contributions`): the team page's lending section, lending's Prometheus
gauges."""

from gpuquota.core.sections import Section
from gpuquota.lending.metrics import LendingCollector
from gpuquota.lending.pages import team_lending_context

PAGE_SECTIONS = [
    # After reclaim's history (20), before the statements (40).
    Section(page="team", slot="main", template="lending/_team_loans.html",
            context=team_lending_context, order=30),
]

METRICS_COLLECTORS = [LendingCollector()]
