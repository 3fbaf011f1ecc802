"""Quotas: created and ended only here, by admins, audited (accounting.md, Quota).

Rows of one team and class never overlap (the exclusion constraint makes it true under
concurrency; the check here names the row). A change may not open a gap between two rows
either: the time between would silently fall to quota 0, so an admin who means that
says so with a 0-GPU row. Quota history is not rewritten: changes take effect from now on.
"""

from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Team, User
from gpuquota.core.contributions import hooks_call
from gpuquota.core.errors import Conflict, DomainError
from gpuquota.core.fields import whole_second
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import GpuClass
from gpuquota.reservations.assigning import lock_team_class
from gpuquota.reservations.models import Quota
from gpuquota.reservations.services import require_admin_actor

MAX_QUOTA_GPUS = 100_000
PAST_TOLERANCE = timedelta(minutes=5)


def _fmt(value: datetime | None) -> str:
    return "open end" if value is None else f"{value:%Y-%m-%d %H:%M}Z"


def _overlaps(a: tuple, b: tuple) -> bool:
    return (a[1] is None or b[0] < a[1]) and (b[1] is None or a[0] < b[1])


def _gaps(spans: list[tuple]) -> set[tuple]:
    spans = sorted(spans, key=lambda s: s[0])
    return {(end, start) for (_a, end), (start, _b) in zip(spans, spans[1:], strict=False)
            if end is not None and end < start}


def quota_rows_check(*, team: Team, gpu_class: GpuClass, proposed: tuple,
                     replacing: Quota | None = None) -> None:
    """Refuse an interval of the team's quota of a class that overlaps another row or
    opens a gap between rows, naming the row or the gap."""
    start, end = proposed
    if end is not None and end <= start:
        raise DomainError("A quota must end after it starts.", field="valid_until")
    others = [q for q in Quota.objects.filter(team=team, gpu_class=gpu_class)
              if replacing is None or q.pk != replacing.pk]
    for row in others:
        if _overlaps(proposed, (row.valid_from, row.valid_until)):
            raise Conflict(
                f"Overlaps {team}'s {gpu_class.name} quota of {row.gpus} GPU(s) from "
                f"{_fmt(row.valid_from)} to {_fmt(row.valid_until)}: quota rows of one team "
                "and class cannot overlap. End that row first.", field="valid_from")
    spans = [(q.valid_from, q.valid_until) for q in others]
    before = _gaps(spans + ([(replacing.valid_from, replacing.valid_until)] if replacing else []))
    opened = sorted(_gaps([*spans, proposed]) - before)
    if opened:
        gap = opened[0]
        raise Conflict(
            f"This would leave {team} with no {gpu_class.name} quota row from {_fmt(gap[0])} "
            f"to {_fmt(gap[1])}. Make the rows meet (a 0-GPU row if that is meant).",
            field="valid_until")


def _not_in_the_past(at: datetime, now: datetime, field: str) -> None:
    if at < now - PAST_TOLERANCE:
        raise DomainError("Quota history is not rewritten: pick a time from now on.",
                          field=field)


def _save(quota: Quota, **kwargs) -> None:
    try:
        with transaction.atomic():
            quota.save(**kwargs)
    except IntegrityError:
        raise Conflict("Quota rows of one team and class cannot overlap (another change won "
                       "the race).", field="valid_from") from None


def _changes(quota: Quota) -> dict:
    return {"team": quota.team.slug, "gpu_class": quota.gpu_class.name, "gpus": quota.gpus,
            "valid_from": quota.valid_from.isoformat(),
            "valid_until": quota.valid_until.isoformat() if quota.valid_until else None}


@transaction.atomic
def quota_create(*, team: Team, gpu_class: GpuClass, gpus: int, valid_from: datetime,
                 valid_until: datetime | None = None, by: User, reason: str = "",
                 now: datetime | None = None) -> Quota:
    """A quota row of `gpus` GPUs for [valid_from, valid_until), from now on, never
    overlapping another row of the team and class nor opening a gap; audited."""
    require_admin_actor(actor=by)
    now = whole_second(now or timezone.now())
    if not isinstance(gpus, int) or not 0 <= gpus <= MAX_QUOTA_GPUS:
        raise DomainError(f"A quota is a whole number of GPUs, 0 to {MAX_QUOTA_GPUS}.",
                          field="gpus")
    valid_from = whole_second(valid_from)
    valid_until = whole_second(valid_until) if valid_until is not None else None
    _not_in_the_past(valid_from, now, "valid_from")
    lock_team_class(team_id=team.id, gpu_class_id=gpu_class.id)
    quota_rows_check(team=team, gpu_class=gpu_class, proposed=(valid_from, valid_until))
    quota = Quota(team=team, gpu_class=gpu_class, gpus=gpus, valid_from=valid_from,
                  valid_until=valid_until)
    _save(quota)
    audit_record(actor=by, action="quota.create", obj=quota, team=team,
                 changes=_changes(quota), reason=reason)
    hooks_call("RESERVATIONS_CHANGED", reason=f"quota {quota.pk} created")
    return quota


@transaction.atomic
def quota_end(*, quota: Quota, at: datetime | None, by: User, reason: str = "",
              now: datetime | None = None) -> Quota:
    """Set when a quota row stops (None: open-ended again), from now on, never overlapping
    the next row nor opening a gap before it; audited. Reservations already granted keep
    their GPUs; later requests are judged against the new quota."""
    require_admin_actor(actor=by)
    now = whole_second(now or timezone.now())
    at = whole_second(at) if at is not None else None
    lock_team_class(team_id=quota.team_id, gpu_class_id=quota.gpu_class_id)
    row = Quota.objects.select_for_update().select_related("team", "gpu_class").get(pk=quota.pk)
    old = row.valid_until
    if old == at:
        return row
    for moment in (m for m in (old, at) if m is not None):
        _not_in_the_past(moment, now, "valid_until")
    quota_rows_check(team=row.team, gpu_class=row.gpu_class, proposed=(row.valid_from, at),
                     replacing=row)
    row.valid_until = at
    _save(row, update_fields=["valid_until"])
    audit_record(actor=by, action="quota.end", obj=row, team=row.team, reason=reason, changes={
        **_changes(row), "valid_until": [old.isoformat() if old else None,
                                         at.isoformat() if at else None]})
    hooks_call("RESERVATIONS_CHANGED", reason=f"quota {row.pk} ended")
    return row
