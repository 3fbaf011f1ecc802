"""The event types a channel can hear, defined once: every `Message.event` the product
queues to a team's channels (`TEAM_EVENTS`), to the platform admins' channels
(`ADMIN_EVENTS`) or to a user's own channels (`USER_EVENTS`), with the words a page shows
for it. A channel that chooses its events
chooses among these (docs/budgets.md, "Channels"); `channel.test` (the Send test button)
reaches a channel whatever it chose."""

TEST_EVENT = "channel.test"

TEAM_EVENTS: dict[str, str] = {
    "budget.threshold": "a budget threshold crossed",
    "statement.sent": "the month's statement sent",
    "reservation.pending": "a request waits for approval",
    "reservation.approved": "a request approved",
    "reservation.denied": "a request denied",
    "reservation.expired": "a request expired undecided",
    "loan.lent": "an idle reserved GPU lent",
    "loan.returned": "a lent GPU returned",
    "loan.preempted": "borrowed GPUs taken back",
    "reclaim.accepted": "a reclaim accepted",
    "reclaim.released": "reclaimed GPUs released",
    "reclaim.closed": "a reclaim closed (busy again)",
    "reclaim.withdrawn": "a reclaim withdrawn",
    "reclaim.objected": "a lead objects to a reclaim",
    "reclaim.upheld": "a reclaim upheld over an objection",
    "gpu.drained": "a GPU of a reservation drained",
    "job.zero_use_warned": "a job at zero use warned",
    "job.zero_use_last_warning": "a job at zero use warned a last time",
    "job.zero_use_stopped": "a job at zero use stopped (or the stop refused)",
    "job.team_digest": "the week's job digest",
}

ADMIN_EVENTS: dict[str, str] = {
    "reservation.pending": "a request waits for approval",
    "reclaim.objected": "a lead objects to a reclaim",
    "gpu.failed": "a GPU failed",
    "gpu.drained": "a node drained for a GPU's failure",
    "node.silent": "a node's agent went silent",
    "node.reporting": "a silent node reports again",
    "statements.ready": "the month's drafts are ready for review",
    "statements.to_approve": "drafts can be approved and are not yet",
}

USER_EVENTS: dict[str, str] = {
    "job.zero_use_warned": "a job of yours at zero use (first warning)",
    "job.zero_use_last_warning": "a job of yours still at zero use (last warning before it stops)",
    "job.zero_use_stopped": "a job of yours stopped for zero use",
    "job.wasteful": "a job of yours wasted GPU time (with advice)",
}


def events_choice_clean(chosen, *, known: dict[str, str]) -> list[str]:
    """The event types `chosen` names, each one of `known`, in `known`'s order; an empty
    list means every event. Raises ValueError naming the first unknown type."""
    chosen = [str(event).strip() for event in (chosen or []) if str(event).strip()]
    for event in chosen:
        if event not in known:
            raise ValueError(f"Unknown event type {event!r}: one of {', '.join(known)}.")
    return [event for event in known if event in chosen]


def event_heard(event: str, *, chosen: list[str]) -> bool:
    """Whether a channel that chose `chosen` (empty: all) hears `event`."""
    return not chosen or event == TEST_EVENT or event in chosen
