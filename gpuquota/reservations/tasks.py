"""Reservation lifecycle by the clock: scheduled → active → ended (and undecided
requests whose window passed → denied). Idempotent: running it twice changes nothing."""

from celery import shared_task

from gpuquota.reservations.services import reservations_advance


@shared_task(name="reservations.advance", autoretry_for=(Exception,), retry_backoff=True,
             max_retries=3)
def reservations_advance_task() -> dict[str, int]:
    """Advance every reservation to the status the clock says (idempotent)."""
    return reservations_advance()


BEAT_SCHEDULE = {
    "reservations-advance": {
        "task": "reservations.advance",
        "schedule": 60.0,
    },
}
