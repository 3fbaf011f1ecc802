"""What reports adds to the pages of the apps below it and to the demo
(`gpuquota.core.contributions`): the team page's statements, the demo's drafts of last
month, and the statements to approve or still unsent on the admin's home page."""

from gpuquota.core.sections import Section
from reports.attention import statements_attention
from reports.demo import demo_statements_seed
from reports.review import team_statements


def team_statements_context(*, team) -> dict:
    return {"team_statements": team_statements(team=team)}


PAGE_SECTIONS = [
    Section(page="team", slot="main", template="reports/_team_statements.html",
            context=team_statements_context, order=40),
]

DEMO_SEEDS = [demo_statements_seed]

ATTENTION = [statements_attention]
