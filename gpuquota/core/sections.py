"""Sections of a page contributed by the apps built on the page's own app (declared as
`PAGE_SECTIONS` in their `contributions.py`): the page's view fills them with
`page_sections(page, **arguments)` and its template places each slot with
`{% load sections %}{% slot sections "name" %}`. So the team page shows reclaim's banner
and reports' statements without `reservations` importing either.

Each page has named slots and fixed keyword arguments; a section's `context` function
takes any of those arguments by name and returns the variables of its template (the
page's arguments are there too), or None to show nothing. A function that several
sections of a page share runs once per page.
"""

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuquota.core.contributions import contributed


@dataclass(frozen=True)
class Page:
    slots: tuple[str, ...]
    arguments: frozenset[str]


PAGES = {
    # accounts.views.home, the landing page of admins and of people in several teams
    "home": Page(slots=("top",), arguments=frozenset({"user", "now"})),
    # reservations.views.team_detail: "top" under the title, "main" after the reservations;
    # `month` is the calendar month the page's figures show (`?month=YYYY-MM`)
    "team": Page(slots=("top", "main"),
                 arguments=frozenset({"team", "user", "can_act", "month", "now"})),
    # usage.views.fleet: "figures" under the fleet summary
    "fleet": Page(slots=("figures",), arguments=frozenset({"user", "now"})),
    # usage.views.gpu_detail and usage.views.node_detail: "main" after the health table
    "gpu": Page(slots=("main",), arguments=frozenset({"gpu", "user", "now"})),
    "node": Page(slots=("main",), arguments=frozenset({"node", "user", "now"})),
    # accounts.views.profile: "main" after the API tokens (the viewer's own settings)
    "profile": Page(slots=("main",), arguments=frozenset({"user", "now"})),
    # usage.views.utilization: "figures" under the overview table
    "utilization": Page(slots=("figures",), arguments=frozenset({"user", "period", "now"})),
}

SectionContext = Callable[..., Mapping[str, Any] | None]


def _argument_names(function: SectionContext) -> tuple[str, ...]:
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in inspect.signature(function).parameters.values()
                 if p.kind in kinds)


@dataclass(frozen=True)
class Section:
    """`template` in `slot` of `page`, with what `context` returns; lower `order` first
    (then INSTALLED_APPS order)."""

    page: str
    slot: str
    template: str
    context: SectionContext | None = None
    order: int = 100

    def __post_init__(self) -> None:
        spec = PAGES.get(self.page)
        if spec is None:
            raise ValueError(f"{self.template}: no page {self.page!r} has sections "
                             f"(pages: {', '.join(sorted(PAGES))}).")
        if self.slot not in spec.slots:
            raise ValueError(f"{self.template}: page {self.page!r} has no slot {self.slot!r} "
                             f"(slots: {', '.join(spec.slots)}).")
        if self.context is not None:
            unknown = set(_argument_names(self.context)) - spec.arguments
            if unknown:
                raise ValueError(
                    f"{self.template}: page {self.page!r} passes no {', '.join(sorted(unknown))}"
                    f" (it passes {', '.join(sorted(spec.arguments))}).")


@dataclass(frozen=True)
class Filled:
    """A section ready to render: its template and its variables."""

    template: str
    context: Mapping[str, Any]


def page_sections(page: str, /, **arguments: Any) -> dict[str, list[Filled]]:
    """The contributed sections of `page` for these arguments, per slot, in order."""
    spec = PAGES[page]
    if set(arguments) != spec.arguments:
        raise TypeError(f"page {page!r} takes {sorted(spec.arguments)}, not {sorted(arguments)}")
    filled: dict[str, list[Filled]] = {slot: [] for slot in spec.slots}
    computed: dict[SectionContext, Mapping[str, Any] | None] = {}
    sections = sorted((s for s in contributed("PAGE_SECTIONS") if s.page == page),
                      key=lambda s: s.order)
    for section in sections:
        variables: Mapping[str, Any] | None = {}
        if section.context is not None:
            if section.context not in computed:
                computed[section.context] = section.context(
                    **{name: arguments[name] for name in _argument_names(section.context)})
            variables = computed[section.context]
        if variables is not None:
            filled[section.slot].append(Filled(section.template, {**arguments, **variables}))
    return filled
