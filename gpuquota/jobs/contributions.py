"""What the job reports add to the apps below (`gpuquota.core.contributions`): the team
page's line on its jobs, linking to their list; the Kubernetes pods' runs (POD_RUNS), for
reliability's lemon test."""

from gpuquota.core.sections import Section
from gpuquota.jobs.pages import team_section_context
from gpuquota.jobs.selectors import pod_runs_held

PAGE_SECTIONS = [
    # After the statements (40): the team's jobs of the week, and where to read them.
    Section(page="team", slot="main", template="jobs/_team_jobs.html",
            context=team_section_context, order=45),
]

POD_RUNS = [pod_runs_held]
