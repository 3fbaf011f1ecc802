"""The demo's lending (`seed_demo` through `gpuquota.lending.contributions`, and `manage.py
demo`): a Robotics reservation of five L4 GPUs on one Kubernetes node, where the simulated
agent leaves GPU 4 idle, so the policy lends it within the demo's shortened idle window
(`make demo` sets LEND_AFTER_IDLE_S=120); and, standing in for a site's scheduler, the
file the simulated agents read to run preemptible work on the lent GPUs (stopped when a
GPU is returned). NLP's H100 reservations opt out (its notebook, which the reclaim demo
shows idle, stays as it is). Idempotent, like the other demo seeds."""

import json
import logging
import os
from datetime import datetime, timedelta

from accounts.models import ClusterIdentity, Team, User
from accounts.selectors import billing_team
from gpuquota.core.errors import DomainError
from gpuquota.inventory.models import GpuClass
from gpuquota.lending.models import LendingOptOut
from gpuquota.lending.optouts import optout_create
from gpuquota.lending.selectors import loans_list
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import reservation_create

logger = logging.getLogger(__name__)
PURPOSE = "[demo] inference fleet, one GPU often idle"
OPT_OUT_REASON = "[demo] interactive notebooks agreed with the platform team"


def seed_demo_loan(*, now: datetime) -> str | None:
    """The Robotics reservation whose idle GPU the policy lends; the line `seed_demo`
    prints about it."""
    reservation = Reservation.objects.filter(purpose=PURPOSE).first()
    team = Team.objects.filter(slug="robotics").first()
    gpu_class = GpuClass.objects.filter(name="L4").first()
    admin = User.objects.filter(is_staff=True, is_active=True).order_by("id").first()
    if reservation is None and None not in (team, gpu_class, admin):
        start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=8)
        try:
            reservation = reservation_create(team=team, gpu_class=gpu_class, count=5,
                                             start=start, end=start + timedelta(days=3),
                                             requested_by=admin, purpose=PURPOSE, now=now)
        except DomainError as exc:
            logger.info("demo reservation %r skipped: %s", PURPOSE, exc.message)
            return None
    nlp, h100 = Team.objects.filter(slug="nlp").first(), GpuClass.objects.filter(
        name="H100-80GB").first()
    if None not in (nlp, h100, admin) and not LendingOptOut.objects.filter(
            team=nlp, gpu_class=h100, ended_at__isnull=True).exists():
        optout_create(actor=admin, team=nlp, gpu_class=h100, reason=OPT_OUT_REASON)
    if reservation is None:
        return None
    return (f"Lending: reservation #{reservation.pk} of {reservation.team.name} lends its idle "
            "GPU to preemptible work (Operations > Lending; the team page's Return now).")


def demo_borrowers(*, at: datetime) -> dict[str, str]:
    """{GPU UUID: unix user} for every GPU lent now: a user of another team than the
    reserving one, on the GPU's cluster (the preemptible work a scheduler would place)."""
    borrowers = {}
    for loan in loans_list(state="open"):
        owner_team_id = loan.assignment.reservation.team_id
        identities = ClusterIdentity.objects.filter(
            cluster_id=loan.gpu.node.cluster_id, kind=ClusterIdentity.Kind.UNIX_USER,
            user__isnull=False).select_related("user").order_by("key")
        for identity in identities:
            team = billing_team(user=identity.user, at=at)
            if team is not None and team.pk != owner_team_id:
                borrowers[loan.gpu.uuid] = identity.key
                break
    return borrowers


def demo_borrowers_write(*, path: str, at: datetime) -> None:
    """Write `demo_borrowers` to `path` when it changed (atomically: the agents never read
    half a file)."""
    text = json.dumps(demo_borrowers(at=at), sort_keys=True)
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(f"{path}.tmp", "w") as f:
        f.write(text)
    os.replace(f"{path}.tmp", path)
