"""What lending adds to the pages and metrics of the apps below it
(`gpuquota.core.contributions`): the team page's lending section, lending's Prometheus
gauges, the demo's reservation with an idle GPU to lend, the end of an assignment's
loans when the reservations' services end it early, and the end of a loan whose GPU a
scheduler shows the reserving team's job holding."""

from gpuquota.core.sections import Section
from gpuquota.lending.demo import seed_demo_loan
from gpuquota.lending.metrics import LendingCollector
from gpuquota.lending.pages import team_lending_context
from gpuquota.lending.services import loan_owner_job_seen, loans_end_with_assignment

PAGE_SECTIONS = [
    # After reclaim's history (20), before the statements (40).
    Section(page="team", slot="main", template="lending/_team_loans.html",
            context=team_lending_context, order=30),
]

METRICS_COLLECTORS = [LendingCollector()]

DEMO_SEEDS = [seed_demo_loan]

ASSIGNMENT_ENDING = [loans_end_with_assignment]

LOAN_OWNER_JOB = [loan_owner_job_seen]
