"""Demo: a reservation holding the simulated notebook GPU (memory held, 0 % busy), so
that the evaluation, on the demo's shortened look-back (`make demo` sets
RECLAIM_LOOKBACK_S=3600 and RECLAIM_GRACE_S=300 unless set), recommends it for reclaim
within the back-filled history. Idempotent, like the other demo seeds."""

import logging
from datetime import datetime, timedelta

from accounts.models import Team, User
from gpuquota.core.errors import DomainError
from gpuquota.core.timeutil import hour_floor
from gpuquota.inventory.models import GpuClass
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import reservation_create

logger = logging.getLogger(__name__)
PURPOSE = "[demo] notebook kept open"


def demo_reclaim_seed(*, now: datetime) -> Reservation | None:
    """One NLP reservation of an H100 from 8 hours ago for two days: the packed placement
    puts it on ada-h100-01 GPU 2, which the faulty node's simulator runs as a notebook."""
    now = hour_floor(now)
    existing = Reservation.objects.filter(purpose=PURPOSE).first()
    team = Team.objects.filter(slug="nlp").first()
    gpu_class = GpuClass.objects.filter(name="H100-80GB").first()
    admin = User.objects.filter(is_staff=True, is_active=True).order_by("id").first()
    if existing or team is None or gpu_class is None or admin is None:
        return existing
    try:
        return reservation_create(team=team, gpu_class=gpu_class, count=1,
                                  start=now - timedelta(hours=8), end=now + timedelta(days=2),
                                  requested_by=admin, purpose=PURPOSE, now=now)
    except DomainError as exc:
        logger.info("demo reservation %r skipped: %s", PURPOSE, exc.message)
        return None
