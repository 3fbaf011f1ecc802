"""Demo: an NLP reservation of two H100s that the evaluation, on the demo's shortened
look-back (`make demo` sets RECLAIM_LOOKBACK_S=3600, RECLAIM_GRACE_S=300 and
RECLAIM_HISTORY_DAYS=0, the history gate off, unless set),
finds within the back-filled history. Under the default `guarded` rule one GPU is
recommended for reclaim: the simulator leaves it truly abandoned (no process, no memory
beyond the driver's, not one busy second, and the team shows no recurring use of it).
The other runs a notebook kernel left open (20 GiB held, 0 %): idle by the spec's rule,
it stays, shown on the recommendation's card as "guarded: held" (docs/reclaim.md).
Idempotent, like the other demo seeds."""

import logging
from datetime import datetime, timedelta

from accounts.models import Team, User
from gpuquota.core.errors import DomainError
from gpuquota.core.timeutil import hour_floor
from gpuquota.inventory.models import GpuClass
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import reservation_create

logger = logging.getLogger(__name__)
PURPOSE = "[demo] notebook kept open, a GPU left behind"


def demo_reclaim_seed(*, now: datetime) -> Reservation | None:
    """One NLP reservation of two H100s from 8 hours ago for two days: the packed
    placement puts it on ada-h100-01 GPUs 2 and 3, which the faulty node's simulator runs
    as a notebook and leaves idle."""
    now = hour_floor(now)
    existing = Reservation.objects.filter(purpose=PURPOSE).first()
    team = Team.objects.filter(slug="nlp").first()
    gpu_class = GpuClass.objects.filter(name="H100-80GB").first()
    admin = User.objects.filter(is_staff=True, is_active=True).order_by("id").first()
    if existing or team is None or gpu_class is None or admin is None:
        return existing
    try:
        return reservation_create(team=team, gpu_class=gpu_class, count=2,
                                  start=now - timedelta(hours=8), end=now + timedelta(days=2),
                                  requested_by=admin, purpose=PURPOSE, now=now)
    except DomainError as exc:
        logger.info("demo reservation %r skipped: %s", PURPOSE, exc.message)
        return None
