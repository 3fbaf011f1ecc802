"""What waits for an admin, for the admin's home page: each app contributes what it knows
(pending approvals, drafts to approve, open recommendations, failed GPUs...) as `ATTENTION`
in its `contributions.py` (`gpuquota.core.contributions`), so the page composes apps it
never imports. A contribution is a selector returning its items at `now`."""

from dataclasses import dataclass
from datetime import datetime

from gpuquota.core.contributions import contributed


@dataclass(frozen=True)
class Attention:
    """One thing an admin may have to act on: how many, and where to act."""

    key: str  # stable, for tests and anchors: "approvals", "drafts"...
    label: str  # what it is, in the plural: "Reservations waiting for approval"
    count: int
    url: str  # the page where it is done, filtered to it where the page can be
    detail: str = ""  # one line more: a total, the oldest, a month
    order: int = 100  # place on the page: money and decisions first, the fleet after


def attention_items(*, now: datetime) -> list[Attention]:
    """Every contributed item at `now`, those with something to do first, each group in
    the items' order."""
    items = [item for items_at in contributed("ATTENTION") for item in items_at(now)]
    return sorted(items, key=lambda item: (item.count == 0, item.order))
