"""The demo's statements (`seed_demo`, through `reports.contributions`): last month's
drafts, once the demo's own seeds have recorded last month's reservations and telemetry
and rolled them up (`gpuquota/demo/last_month.py`)."""

from datetime import datetime

from reports.models import Statement
from reports.services_statements import month_previous, statements_draft_month


def demo_statements_draft(*, now: datetime) -> list[Statement]:
    """Last month's drafts (refreshed if they exist: idempotent)."""
    return statements_draft_month(period=month_previous(now), now=now)


def demo_statements_seed(*, now: datetime) -> str:
    """Draft last month's statements; the line `seed_demo` prints about them."""
    drafts = demo_statements_draft(now=now)
    return "Last month's statements (drafts, /statements/review/): " + ", ".join(
        f"{s.team_name} {s.total} {s.currency}" for s in drafts)
