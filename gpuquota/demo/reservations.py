"""Demo reservations: past, current, future and one pending (over-quota) request.

Called by the lead's `seed_demo` after the organisation exists. Idempotent: each
demo reservation is recognised by its purpose text, and whatever team, class,
lead or capacity is missing is skipped."""

import logging
from datetime import datetime, timedelta

from accounts.models import Team, User
from accounts.selectors import team_leads
from gpuquota.core.errors import DomainError
from gpuquota.core.timeutil import hour_floor
from gpuquota.inventory.models import GpuClass
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.selectors import quotas_current
from gpuquota.reservations.services import reservation_create

logger = logging.getLogger(__name__)
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)

# (team slug, class name, count, start offset, end offset, purpose); past windows are
# recorded by an admin (backfill), the rest requested by the team's lead
PLAN = [
    ("vision", "H100-80GB", 2, -10 * DAY, -3 * DAY, "[demo] detector pre-training"),
    ("speech", "A100-40GB", 2, -6 * DAY, -4 * DAY, "[demo] ASR fine-tune"),
    # Current ones start within the demo's back-filled history (seed_demo --history-hours).
    ("vision", "H100-80GB", 2, -8 * HOUR, 5 * DAY, "[demo] segmentation sweep"),
    ("speech", "A100-40GB", 2, -6 * HOUR, 2 * DAY, "[demo] TTS training"),
    ("robotics", "L4", 2, 1 * DAY, 4 * DAY, "[demo] sim rendering"),
    ("nlp", "H100-80GB", 1, 3 * DAY, 6 * DAY, "[demo] eval harness"),
    ("vision", "A100-40GB", 1, 2 * DAY, 3 * DAY, "[demo] labeling model"),
]
PENDING = ("speech", "H100-80GB", 2 * DAY, 3 * DAY, "[demo] large-batch experiment")


def _admin() -> User | None:
    return User.objects.filter(is_staff=True, is_active=True).order_by("id").first()


def _one(team: Team, gpu_class: GpuClass, count: int, start: datetime, end: datetime,
         purpose: str, actor: User | None, now: datetime) -> None:
    if actor is None or Reservation.objects.filter(team=team, purpose=purpose).exists():
        return
    try:
        reservation_create(team=team, gpu_class=gpu_class, count=count, start=start, end=end,
                           requested_by=actor, purpose=purpose, now=now)
    except DomainError as exc:
        logger.info("demo reservation %r skipped: %s", purpose, exc.message)


def demo_reservations_seed(*, now: datetime) -> None:
    """Add demo reservations for whatever demo teams and classes exist (idempotent)."""
    now = hour_floor(now)
    teams = {t.slug: t for t in Team.objects.filter(slug__in={p[0] for p in PLAN} | {PENDING[0]})}
    classes = {c.name: c for c in GpuClass.objects.all()}
    admin = _admin()
    for slug, class_name, count, lo, hi, purpose in PLAN:
        team, gpu_class = teams.get(slug), classes.get(class_name)
        if team is None or gpu_class is None:
            continue
        lead = next(iter(team_leads(team=team)), None)
        actor = admin if now + lo < now else (lead or admin)
        _one(team, gpu_class, count, now + lo, now + hi, purpose, actor, now)
    slug, class_name, lo, hi, purpose = PENDING
    team, gpu_class = teams.get(slug), classes.get(class_name)
    if team is not None and gpu_class is not None:
        quota = next((q.gpus for q in quotas_current(team=team, at=now + lo)
                      if q.gpu_class_id == gpu_class.id), 0)
        lead = next(iter(team_leads(team=team)), None) or admin
        _one(team, gpu_class, quota + 1, now + lo, now + hi, purpose, lead, now)
