"""Writing a drain to its scheduler (docs/reliability.md#drains) in three steps, so that no
API call is held inside a database transaction and a transaction rolled back never leaves a
taint or a drained node behind:

1. `drain_plan` (reads only, no transaction): what the scheduler will hold, the failed GPU
   alone (the DeviceTaintRule the backend plans for it) or its node;
2. the caller commits the drain `pending`, with that scope: from then on the reconcile
   loop's plan keeps a GPU's rule (core's GPUS_DRAINED), so a reconcile running while the
   rule is written neither deletes it nor races it;
3. `drain_write` (after the commit): write it, read back, then record in one transaction
   what the scheduler showed (drained or refused), the managed object, the audit entry and
   the admins' message.

A drain left `pending` (the process died between 2 and 3) is written by the next pass."""

from django.db import transaction

from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Node
from gpuquota.reliability.models import Drain
from gpuquota.reliability.told import drain_tell
from gpuquota.schedulers.backend import BackendError, SchedulerObject, backend_for
from gpuquota.schedulers.models import BackendConfig
from gpuquota.schedulers.services import managed_object_written

AFTER_JOBS = ", after running jobs"


def backend_of(node: Node):
    """The writing backend of the node's cluster, None where none writes."""
    config = BackendConfig.objects.filter(cluster=node.cluster,
                                          mode=BackendConfig.Mode.WRITE).first()
    return backend_for(node.cluster, config) if config is not None else None


def drain_plan(backend, drain: Drain) -> tuple[SchedulerObject | None, str]:
    """(the object holding the failed GPU alone, or None: the node; why the scheduler would
    refuse it, or ""). Reads only. A node drain escalated stays one: its node's work is
    held already."""
    gpu = drain.gpu
    if backend is None or gpu.index is None or (
            drain.scope == Drain.Scope.NODE and drain.state != Drain.State.PENDING
            and drain.pk is not None):
        return None, ""
    try:
        return backend.gpu_drain_plan(hostname=drain.node.hostname, index=gpu.index,
                                      uuid=gpu.uuid, reason=drain.reason,
                                      at_once=not drain.after_jobs), ""
    except BackendError as exc:
        return None, str(exc)[:2000]


def _write(backend, drain: Drain, planned: SchedulerObject | None) -> tuple[str, str, str]:
    """(state, scope, error) after writing the drain; never in a transaction."""
    if backend is None:
        return Drain.State.RECORDED, drain.scope, ""
    try:
        if planned is not None:
            backend.gpu_drain(obj=planned)
            return Drain.State.DRAINED, Drain.Scope.GPU, ""
        backend.node_drain(hostname=drain.node.hostname,
                           reason=drain.reason + (AFTER_JOBS if drain.after_jobs else ""))
        return Drain.State.DRAINED, Drain.Scope.NODE, ""
    except BackendError as exc:
        return Drain.State.REFUSED, drain.scope, str(exc)[:2000]


def drain_write(drain: Drain, *, backend, planned: SchedulerObject | None, refused: str = "",
                changes: dict | None = None, tell: bool = True) -> Drain:
    """Write the committed `pending` drain to its scheduler (outside any transaction), then
    record what it showed, audited (`changes` added) and told to the admins once."""
    if refused:
        state, scope, error = Drain.State.REFUSED, drain.scope, refused
    else:
        state, scope, error = _write(backend, drain, planned)
    with transaction.atomic():
        drain.state, drain.scope, drain.error = state, scope, error
        drain.save(update_fields=["state", "scope", "error"])
        if planned is not None and state == Drain.State.DRAINED:
            managed_object_written(cluster=drain.node.cluster, obj=planned, at=drain.drained_at)
        audit_record(actor=None, action="node_drain", obj=drain, reason=drain.reason, changes={
            "node": str(drain.node), "gpu": drain.gpu.uuid, "needs": drain.needs,
            "after_jobs": drain.after_jobs, "state": drain.state, "scope": drain.scope,
            "error": drain.error, **(changes or {})})
        if tell:
            drain_tell(drain)
    return drain

