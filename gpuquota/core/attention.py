"""What waits for an admin, for the admin's home page: each app contributes what it knows
(pending approvals, drafts to approve, open recommendations, failed GPUs...) through this
small registry, so the page composes apps it never imports. A source is a selector that
returns its items at `now`; it registers once, from its app's `ready()`."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Attention:
    """One thing an admin may have to act on: how many, and where to act."""

    key: str  # stable, for tests and anchors: "approvals", "drafts"...
    label: str  # what it is, in the plural: "Reservations waiting for approval"
    count: int
    url: str  # the page where it is done, filtered to it where the page can be
    detail: str = ""  # one line more: a total, the oldest, a month
    order: int = 100  # place on the page: money and decisions first, the fleet after


Source = Callable[[datetime], list[Attention]]
_sources: list[Source] = []


def attention_source(source: Source) -> Source:
    """Register `source` (once; registering it again changes nothing)."""
    if source not in _sources:
        _sources.append(source)
    return source


def attention_items(*, now: datetime) -> list[Attention]:
    """Every registered source's items at `now`, those with something to do first, each
    group in its sources' order."""
    items = [item for source in _sources for item in source(now)]
    return sorted(items, key=lambda item: (item.count == 0, item.order))
