"""Drains by policy (docs/reliability.md#drains): a critical failure (the taxonomy's
critical severity) drains its node at once through the cluster's scheduler backend, with
a reason gpuquota owns (`[gpuquota] xid 79`); a lesser one (a hardware warning whose fix
is a reset, a reboot or a replacement) drains it after its running jobs end, and a
critical failure on a node draining for a lesser one escalates that drain. The node
returns only after the fix the failure needs: automatically when that fix is a reset or a
reboot and the GPU's failed interval closed after it (a new boot with a good sample),
otherwise by an admin naming the fix. Every drain and return is audited, and every new
drain told to the admins' channels (`told.py`)."""

from collections import defaultdict
from datetime import datetime

from django.db import transaction
from django.db.models import Q

from gpuquota.core.errors import DomainError, PermissionDenied
from gpuquota.core.services import audit_record
from gpuquota.ingest.models import EventType, GpuEvent
from gpuquota.ingest.taxonomy import (
    CRITICAL_EVENT_TYPES,
    CRITICAL_XIDS,
    EVENTS,
    XIDS,
    Action,
    Severity,
    classify,
)
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.reliability.drainwrite import backend_of, drain_plan, drain_write
from gpuquota.reliability.models import HOLDING_STATES, Drain
from gpuquota.schedulers.backend import BackendError
from gpuquota.schedulers.services import managed_object_written

AUTO_RETURN = {Action.RESET_GPU.value, Action.REBOOT.value}
#: The fixes that drain a node, least first: a warning needing none of them never drains.
DRAINING_ACTIONS = (Action.RESET_GPU, Action.REBOOT, Action.REPLACE)
LESSER_XIDS = frozenset(x for x, e in XIDS.items()
                        if e.severity == Severity.WARNING and e.action in DRAINING_ACTIONS)
LESSER_EVENT_TYPES = frozenset(t for t, e in EVENTS.items()
                               if e.severity == Severity.WARNING and e.action in DRAINING_ACTIONS)
FIXES = {  # the fixes an admin may name, per what the failure needs
    Action.RESET_GPU.value: {"reset", "reboot", "diagnostic", "replaced", "admin"},
    Action.REBOOT.value: {"reboot", "diagnostic", "replaced", "admin"},
    Action.REPLACE.value: {"replaced", "diagnostic", "admin"},
}


def _escalate(drain: Drain, event, entry, now: datetime) -> dict | None:
    """A critical failure on a node (or GPU) draining after its jobs for a lesser event: the
    drain becomes the critical one's (at once, its reason and fix), to be written again;
    what it was (None: no escalation)."""
    if not drain.after_jobs or entry.severity != Severity.CRITICAL or drain.event_at >= event.ts:
        return None
    before = {"reason": drain.reason, "needs": drain.needs}
    drain.after_jobs, drain.event_at, drain.drained_at = False, event.ts, now
    drain.gpu = event.gpu.parent or event.gpu
    drain.reason = f"xid {event.xid}" if event.type == EventType.XID else event.type
    order = [a.value for a in DRAINING_ACTIONS]
    drain.needs = max(drain.needs, entry.action.value, key=order.index)
    return before


def _commit_then_write(drain: Drain, *, changes: dict | None = None,
                       tell: bool = True) -> Drain:
    """Plan (reads), commit the drain `pending` with its scope, then write it
    (drainwrite.py: no API call inside the transaction)."""
    backend = backend_of(drain.node)
    planned, refused = drain_plan(backend, drain)
    with transaction.atomic():
        drain.state = Drain.State.PENDING
        if planned is not None:
            drain.scope = Drain.Scope.GPU
        drain.save()
    return drain_write(drain, backend=backend, planned=planned, refused=refused,
                       changes=changes, tell=tell)


def _covering(event) -> Q:
    """The drains that hold the event's GPU: its node's node-wide ones and its own."""
    return Q(node=event.node, scope=Drain.Scope.NODE) | Q(gpu=event.gpu.parent or event.gpu)


def drains_apply(*, since: datetime, now: datetime) -> list[Drain]:
    """Drain the GPU (where the scheduler can name one GPU) or else the node of every
    critical failure or lesser event received in [since, now] that no open drain holds and
    no drain for it or a later failure held; idempotent (one open drain per node, or per
    GPU where drained alone; a failure that was drained and returned never drains again).
    Each drain's row is committed before its scheduler is written (drainwrite.py): call it
    outside a transaction."""
    draining = (Q(type__in=CRITICAL_EVENT_TYPES | LESSER_EVENT_TYPES)
                | Q(type=EventType.XID, xid__in=CRITICAL_XIDS | LESSER_XIDS))
    events = (GpuEvent.objects.filter(draining, gpu__isnull=False, received_at__gte=since,
                                      received_at__lte=now)
              .select_related("gpu", "node", "node__cluster").order_by("ts"))
    made = [_commit_then_write(drain) for drain in Drain.objects.filter(
        state=Drain.State.PENDING, released_at__isnull=True).select_related(
        "node__cluster", "gpu")]  # left pending by a pass that died before writing them
    for event in events:
        entry = classify(type=event.type, xid=event.xid)
        drained = Drain.objects.filter(_covering(event))
        open_drain = drained.filter(released_at__isnull=True).order_by("-scope").first()
        if open_drain is not None:  # the node's drain first ("node" > "gpu")
            before = _escalate(open_drain, event, entry, now)
            if before is not None:
                made.append(_commit_then_write(open_drain, changes={"escalated_from": before},
                                               tell=False))
            continue
        if drained.filter(event_at__gte=event.ts).exists():
            continue  # drained for this failure or a later one already
        reason = f"xid {event.xid}" if event.type == EventType.XID else event.type
        made.append(_commit_then_write(Drain(
            node=event.node, gpu=event.gpu.parent or event.gpu, reason=reason,
            needs=entry.action.value, event_at=event.ts, drained_at=now,
            after_jobs=entry.severity != Severity.CRITICAL)))
    return made


def _key(drain: Drain) -> tuple:
    if drain.scope == Drain.Scope.GPU:
        return ("gpu", drain.node.hostname, drain.gpu.index)
    return ("node", drain.node.hostname)


def _cluster_progress(cluster_drains: list[Drain]) -> dict[tuple, str]:
    """One cluster's drains read back in one pass (its backend lists what it reads once);
    empty where no backend writes for it or it fails to answer."""
    backend = backend_of(cluster_drains[0].node)
    if backend is None:
        return {}
    keys = {_key(d) for d in cluster_drains}
    try:
        return backend.drains_progress(
            nodes=sorted(k[1] for k in keys if k[0] == "node"),
            gpus=sorted(k[1:] for k in keys if k[0] == "gpu"))
    except BackendError:
        return {}


def drains_observe(*, now: datetime) -> list[Drain]:
    """Read back each open drain written to a scheduler: is work still running on the node
    (or, for a GPU drained alone, on that GPU): draining, or none left: drained? One pass per
    cluster, whatever the number of its drains. The drains whose progress changed; a backend
    that cannot tell, or fails to answer, leaves the last reading."""
    by_cluster: dict[int, list[Drain]] = defaultdict(list)
    for drain in Drain.objects.filter(released_at__isnull=True, state=Drain.State.DRAINED
                                      ).select_related("node__cluster", "gpu"):
        by_cluster[drain.node.cluster_id].append(drain)
    changed = []
    for cluster_drains in by_cluster.values():
        progress = _cluster_progress(cluster_drains)
        for drain in cluster_drains:
            found = progress.get(_key(drain), "")
            if found and found != drain.progress:
                drain.progress, drain.progress_at = found, now
                drain.save(update_fields=["progress", "progress_at"])
                changed.append(drain)
    return changed


def _release(drain: Drain, *, at: datetime, by, fix: str) -> Drain:
    """Undo the drain on the scheduler (outside any transaction: a refusal stays a
    BackendError and the drain stays open), then record the return in one transaction (a
    failure there leaves the drain open: the reconcile loop writes its rule again)."""
    backend = backend_of(drain.node)
    removed = None
    if backend is not None and drain.state in HOLDING_STATES:
        if drain.scope == Drain.Scope.GPU:
            removed = backend.gpu_resume(hostname=drain.node.hostname, index=drain.gpu.index,
                                         uuid=drain.gpu.uuid)
        else:
            backend.node_resume(hostname=drain.node.hostname)
    with transaction.atomic():
        if removed is not None:
            managed_object_written(cluster=drain.node.cluster, obj=removed, removed=True, at=at)
        drain.released_at, drain.released_by, drain.release_fix = at, by, fix[:120]
        drain.save(update_fields=["released_at", "released_by", "release_fix"])
        audit_record(actor=by, action="node_resume", obj=drain, reason=fix, changes={
            "node": str(drain.node), "needs": drain.needs, "scope": drain.scope})
    return drain


def drain_release(*, drain: Drain, by, fix: str, at: datetime) -> Drain:
    """An admin returns a drained node to service, naming the fix done; refused when that
    fix is not one the failure needs (a replacement is not undone by a reset)."""
    if not (by is not None and by.is_authenticated and by.is_staff):
        raise PermissionDenied("Only admins can return a drained node.")
    if drain.released_at is not None:
        raise DomainError("This drain has already ended.", field="drain")
    allowed = FIXES.get(drain.needs, {"admin"})
    if fix not in allowed:
        raise DomainError(f"A {drain.reason} needs {drain.needs}: name one of "
                          f"{', '.join(sorted(allowed))}.", field="fix")
    return _release(drain, at=at, by=by, fix=fix)


def drains_auto_release(*, now: datetime) -> list[Drain]:
    """Return the nodes whose drain needs a reset or a reboot once the GPU's failed (or, for
    a lesser event, degraded) interval that the failure opened has closed (a new boot
    reported a good sample). A lesser event that opened no interval waits for an admin."""
    released = []
    for drain in Drain.objects.filter(released_at__isnull=True, needs__in=AUTO_RETURN,
                                      state__in=[Drain.State.DRAINED, Drain.State.RECORDED]):
        interval = (GpuHealthInterval.objects.filter(
            gpu=drain.gpu, valid_from__lte=drain.event_at, state__in=(
                [GpuHealthInterval.State.FAILED, GpuHealthInterval.State.DEGRADED]
                if drain.after_jobs else [GpuHealthInterval.State.FAILED]))
            .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=drain.event_at))
            .first())
        if interval is None or interval.valid_until is None or interval.valid_until > now:
            continue
        released.append(_release(drain, at=now, by=None,
                                 fix=interval.closed_reason or "recovered"))
    return released
