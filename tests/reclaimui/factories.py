"""A small fleet with real telemetry for the reclaim pages: reservations whose GPUs
idle (a notebook holding memory at 0 %) or work, rolled up, then evaluated by the
real service, so the pages show what the engine really finds."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from gpuquota.outbox.services import gpu_interval_mark_dirty
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.usage.sweep import dirty_hours_process
from reclaim.models import Recommendation
from reclaim.services import recommendations_evaluate
from tests.factories import AdminFactory, NodeFactory, RateCardFactory, make_gpu
from tests.usage.factories import add_processes, add_samples, minute_samples

LOOKBACK_H = 2
ALTERNATING = -1  # a GPU's `utils` entry: busy 10 minutes in 20, out of step with its neighbour
GIB = 2**30


@dataclass
class ReclaimFleet:
    now: datetime
    reservations: list[Reservation] = field(default_factory=list)

    def recommendation(self, reservation: Reservation, kind: str = "reclaim") -> Recommendation:
        return Recommendation.objects.get(reservation=reservation, kind=kind,
                                          status__in=Recommendation.LIVE)


def policy_settings(settings, hours: int = LOOKBACK_H) -> None:
    """A short look-back (the telemetry spans it and half an hour more), default
    thresholds, and the spec's rule, which finds the notebook idle (the default guarded
    rule keeps a GPU holding memory: its card is tested in tests/reclaim)."""
    settings.RECLAIM_LOOKBACK_S = hours * 3600
    settings.RECLAIM_GRACE_S = 4 * 3600
    settings.RECLAIM_RULE = "spec"


def reservation_with_telemetry(team, *, utils: list[int | None], now: datetime,
                               over_quota: bool = False, hours_left: int = 6,
                               host: str | None = None, hours: int = LOOKBACK_H
                               ) -> Reservation:
    """A running reservation of len(utils) GPUs on one node; GPU i reports `utils[i]` %
    every minute of the last `hours` and a half (None: never reports), memory held and a
    process of `alice`."""
    start = now - timedelta(hours=hours, minutes=30)
    node = NodeFactory(hostname=host, last_seen_at=now) if host else NodeFactory(last_seen_at=now)
    gpus = [make_gpu(node=node, index=i, at=start - timedelta(days=1))
            for i in range(len(utils))]
    with transaction.atomic():
        reservation = Reservation.objects.create(
            team=team, gpu_class=gpus[0].gpu_class, count=len(gpus), start=start,
            end=now + timedelta(hours=hours_left), status=Reservation.Status.ACTIVE,
            over_quota=over_quota, requested_by=AdminFactory(), requested_at=start,
            is_backfill=True, purpose="notebook" if 0 in utils else "training")
        for gpu in gpus:
            Assignment.objects.create(reservation=reservation, gpu=gpu, assigned_from=start,
                                      assigned_until=reservation.end)
        gpu_interval_mark_dirty(gpu_ids=[g.id for g in gpus], start=start, end=reservation.end)
    minutes = int((now - start).total_seconds() // 60)
    for i, (gpu, util) in enumerate(zip(gpus, utils, strict=True)):
        if util is None:
            continue
        if util == ALTERNATING:  # busy every other 10 minutes, half the GPUs at a time
            add_samples(gpu, [{"start": start + timedelta(minutes=m),
                               "util": 90 if (m // 10) % 2 == i % 2 else 0}
                              for m in range(minutes)])
        else:
            minute_samples(gpu, start, minutes, util=util, memory_used_bytes_max=30 * GIB,
                           memory_used_bytes_avg=30 * GIB)
        add_processes(gpu, start, minutes, user="alice")
    return reservation


def reclaim_fleet(roles, *, extra: int = 0, hours: int = LOOKBACK_H) -> ReclaimFleet:
    """Vision: a 2-GPU reservation with one idle GPU (the notebook) and one at 80 %;
    Speech: an over-quota reservation of one idle GPU (ranked first). `extra` more
    idle reservations for Speech. Rolled up and evaluated at `now`."""
    now = timezone.now().replace(microsecond=0)
    RateCardFactory(reserved_rate=Decimal("2.50"))
    fleet = ReclaimFleet(now=now)
    fleet.reservations.append(
        reservation_with_telemetry(roles.team, utils=[0, 80], now=now, host="vision-node",
                                   hours=hours))
    fleet.reservations.append(reservation_with_telemetry(
        roles.other_team, utils=[0], now=now, over_quota=True, host="speech-node",
        hours=hours))
    for _ in range(extra):
        fleet.reservations.append(
            reservation_with_telemetry(roles.other_team, utils=[0, 0], now=now, hours=hours))
    dirty_hours_process()
    recommendations_evaluate(now=now)
    return fleet
