"""The scheduler-backend interface: one implementation per kind of scheduler (Slurm,
Kubernetes), found by `Cluster.scheduler` in a registry.

A backend turns gpuquota's decisions into the objects its scheduler should have and keeps
them there:

- `capabilities()`: what the scheduler can enforce (version, plugins, limits...), from
  which each reservation gets a binding level;
- `plan(at, capabilities=)`: reservations, quotas and loans at `at` -> the desired
  objects, each named or labelled `gq-...` (`owned_name`), and a binding per reservation;
- `observe()`: the objects the scheduler has now that gpuquota owns (`gq-`) or plans
  for (a team's existing account); `owns()` says which are ours, and only those are
  ever deleted;
- `diff(plan, observed)`: the actions that make the scheduler match the plan;
- `apply(actions)`: performs them one by one, stopping at the first failure (or, for a
  backend whose objects stand alone, going on past each);
- `render(actions)`: the same actions as the commands they run (the dry run and the
  export for sites that forbid writes);
- `foreign_use(clusters=, period=, team=)`: what the scheduler's records (or, where it has
  none, the agents') prove of other accounts' work on reserved GPUs, outside a loan, in a
  period (docs/accounting.md#foreign-use): one list of `ForeignUse`, whatever the scheduler.

The reconcile loop (`gpuquota.schedulers.reconcile`) calls them; it records runs, drift,
problems and bindings, so a backend only talks to its scheduler.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Literal

from django.utils.module_loading import import_string

from gpuquota.schedulers.models import BindingLevel

OWNED_PREFIX = "gq-"


def owned_name(*parts: object) -> str:
    """`gq-` + the parts joined by `-`: the name (or label) of an object gpuquota owns."""
    return OWNED_PREFIX + "-".join(str(p) for p in parts)


def is_owned(name: str) -> bool:
    return name.startswith(OWNED_PREFIX)


class BackendError(Exception):
    """The scheduler could not be reached or answered something unusable. The message is
    what admins read on the cluster's problems; `detail` holds the command's output.
    `outage`: the scheduler's daemons cannot be reached (every command fails alike, so the
    message is the same whichever command found it: one problem per outage). `took`: for
    a write the scheduler took in part, its managed fields as read back."""

    def __init__(self, message: str, *, detail: str = "", outage: bool = False,
                 took: dict | None = None):
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.outage = outage
        self.took = took


@dataclass(frozen=True)
class SchedulerObject:
    """One object on the scheduler: `kind` (backend-defined, e.g. `account`, `qos`,
    `reservation`), its `gq-` `name`, and the `fields` gpuquota manages (strings)."""

    kind: str
    name: str
    fields: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.name)


@dataclass(frozen=True)
class Action:
    """Create, update or delete one object; `before` is what was observed (empty on create)."""

    verb: Literal["create", "update", "delete"]
    obj: SchedulerObject
    before: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.verb} {self.obj.kind} {self.obj.name}"


@dataclass(frozen=True)
class Binding:
    """How strongly the scheduler holds one reservation, why, and by which object."""

    level: BindingLevel
    why: str
    scheduler_object: str = ""


@dataclass
class Plan:
    at: datetime
    objects: list[SchedulerObject] = field(default_factory=list)
    bindings: dict[int, Binding] = field(default_factory=dict)  # by reservation id


@dataclass
class Observed:
    objects: list[SchedulerObject] = field(default_factory=list)


@dataclass(frozen=True)
class CapabilityReport:
    version: str
    best_binding: BindingLevel
    facts: Mapping[str, object] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobStopped:
    """A running job stopped through the scheduler, as reading it back showed: `how` is
    `cancelled`, `requeued` (Slurm), `deleted` (a bare pod) or `suspended` (a batch Job, or
    its Kueue Workload deactivated); `note` says why it was not what was asked, if so."""

    how: str
    note: str = ""
    target: str = ""  # what was stopped, when not the job itself: `Job vision/train`


@dataclass
class ApplyResult:
    applied: list[Action] = field(default_factory=list)
    failed: Action | None = None  # the first refused action
    error: BackendError | None = None
    refused: list[tuple[Action, BackendError]] = field(default_factory=list)  # every one


@dataclass(frozen=True)
class ForeignUse:
    """One job (Slurm) or pod (Kubernetes) of an account or namespace that is neither the
    reserving team's nor a borrower's on a loan, on GPUs a reservation held, while it held
    them, in the period asked for (docs/accounting.md#foreign-use). The evidence: `gpus`
    (`node:index`, or `node uuid`) where the records name the GPUs, else `nodes`."""

    cluster_id: int
    reservation: object  # the Reservation, its team selected
    account: str  # the Slurm account or the Kubernetes namespace ("" when none was seen)
    using_team: str  # the slug of the team that account belongs to, "" when none
    job: str  # the Slurm job id or the pod's name
    first_seen: datetime  # the job's start, or the first sample window it ran in
    last_seen: datetime | None  # its end or the last window's end; None: still running
    evidence: str  # what proves it, for people: which records
    nodes: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    user: str = ""
    seen_s: int | None = None  # how long the agents saw it (sampled backends only)
    detail: object = None  # the backend's own record (a SlurmJob), for its pages

    @property
    def reserving_team(self) -> str:
        return self.reservation.team.slug


class Backend(ABC):
    """The interface every scheduler backend implements. `kinds` orders creation (an
    account before its associations); deletions run in the reverse order."""

    scheduler: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]]
    #: Whether each object stands alone, so one refused action leaves the rest worth
    #: applying: `apply` then goes on past refusals (each becomes its own problem).
    independent_objects: ClassVar[bool] = False

    def __init__(self, *, cluster, config):
        self.cluster = cluster
        self.config = config

    @classmethod
    @abstractmethod
    def options_check(cls, options: dict, *, cluster) -> None:
        """Refuse options (`BackendConfig.options`) this backend cannot read, with a
        DomainError naming the field."""

    @abstractmethod
    def capabilities(self) -> CapabilityReport: ...

    @abstractmethod
    def plan(self, at: datetime, *, capabilities: CapabilityReport) -> Plan: ...

    @abstractmethod
    def observe(self) -> Observed: ...

    @abstractmethod
    def apply_action(self, action: Action) -> None:
        """Perform one action; raise BackendError when the scheduler refuses it."""

    @abstractmethod
    def render(self, actions: Iterable[Action]) -> list[str]:
        """The commands the actions run, one string per command, for people to read."""

    def node_drain(self, *, hostname: str, reason: str) -> None:
        """Keep new work off a node for a failure (docs/reliability.md#drains); read back.
        A backend that cannot says so with a BackendError."""
        raise BackendError(f"The {self.scheduler} backend cannot drain nodes yet.")

    def node_resume(self, *, hostname: str) -> bool:
        """Undo gpuquota's own drain of the node (never the site's); whether it did."""
        raise BackendError(f"The {self.scheduler} backend cannot resume nodes yet.")

    def gpu_drain_plan(self, *, hostname: str, index: int, uuid: str, reason: str,
                       at_once: bool) -> SchedulerObject | None:
        """The object that would keep new work off one GPU of a node for a failure (its
        running work evicted too when `at_once`), or None where the scheduler cannot name one
        GPU: the caller drains the node. Reads only; a refusal is a BackendError."""
        return None

    def gpu_drain(self, *, obj: SchedulerObject) -> None:
        """Write the object `gpu_drain_plan` gave, read back (the caller records it as
        managed, so drift on it shows)."""
        raise BackendError(f"The {self.scheduler} backend cannot drain one GPU.")

    def gpu_resume(self, *, hostname: str, index: int, uuid: str) -> SchedulerObject:
        """Undo gpuquota's own drain of one GPU, read back; the object that held it (absent
        now: deleted, or gone already)."""
        raise BackendError(f"The {self.scheduler} backend cannot drain one GPU.")


    def job_stop(self, *, job_id: str, namespace: str = "", requeue: bool = False,
                 started_at: datetime | None = None) -> JobStopped:
        """Stop the run of a job that started at `started_at` (docs/jobs.md#stopping):
        requeue it where asked and the scheduler can, else cancel it; read back. A refusal,
        or another run under the same id, is a BackendError."""
        raise BackendError(f"The {self.scheduler} backend cannot stop jobs.")

    def node_drain_progress(self, *, hostname: str) -> str:
        """"draining" (jobs still run on the drained node), "drained" (it is empty), ""
        (not drained, or the backend cannot tell)."""
        return ""

    def drains_progress(self, *, nodes: list[str],
                        gpus: list[tuple[str, int]]) -> dict[tuple, str]:
        """How far the cluster's drains got, in one pass: ("node", hostname) and ("gpu",
        hostname, index) -> as `node_drain_progress`, for a drained node or the work using
        one drained GPU. By default each node is read by itself; no GPU drained alone."""
        return {("node", hostname): self.node_drain_progress(hostname=hostname)
                for hostname in nodes}

    @classmethod
    def foreign_use(cls, *, clusters, period, team=None) -> list[ForeignUse]:
        """Foreign use on `clusters` (this backend's) in `period` (a `core.timeutil.Period`),
        on `team`'s reservations only if given (docs/accounting.md#foreign-use). Read from
        gpuquota's own records of the scheduler, never by asking it; a backend whose
        scheduler keeps no record of whose work ran where has no evidence: none."""
        return []

    def export(self, plan: Plan) -> dict[str, str]:
        """The whole plan as files a site applies itself: file name -> content."""
        return {"commands.txt": "\n".join(self.render(self.diff(plan, Observed()))) + "\n"}

    def diff(self, plan: Plan, observed: Observed) -> list[Action]:
        """Creates and updates in `kinds` order, then deletes of owned objects no longer
        planned, in the reverse order. Only the fields the plan names are compared, so a
        site's own settings on an object are left alone."""
        seen = {o.key: o for o in observed.objects}
        wanted = {o.key: o for o in plan.objects}
        order = {kind: i for i, kind in enumerate(self.kinds)}
        actions: list[Action] = []
        for obj in sorted(plan.objects, key=lambda o: (order[o.kind], o.name)):
            current = seen.get(obj.key)
            if current is None:
                actions.append(Action("create", obj))
            elif any(current.fields.get(k) != v for k, v in obj.fields.items()):
                actions.append(Action("update", obj, before=dict(current.fields)))
        stale = [o for key, o in seen.items() if key not in wanted and self.owns(o)]
        for obj in sorted(stale, key=lambda o: (-order.get(o.kind, 0), o.name)):
            actions.append(Action("delete", obj, before=dict(obj.fields)))
        return actions

    def owns(self, obj: SchedulerObject) -> bool:
        """Whether gpuquota created this object: only those are ever deleted. Objects of the
        site that the plan names (a team's existing account) are updated, never deleted."""
        return is_owned(obj.name)

    def apply(
        self, actions: Iterable[Action], *, on_applied: Callable[[Action], None] | None = None
    ) -> ApplyResult:
        """Apply in order, stopping at the first failure (what was done is in `applied`), or
        going on past each one where `independent_objects`; `on_applied` records each
        action as soon as the scheduler took it."""
        result = ApplyResult()
        for action in actions:
            try:
                self.apply_action(action)
            except BackendError as exc:
                result.refused.append((action, exc))
                if exc.took is not None and on_applied is not None:
                    # What the scheduler did take is recorded as applied (so drift is
                    # only ever someone else's change); the refusal is the problem.
                    on_applied(Action(action.verb, SchedulerObject(
                        action.obj.kind, action.obj.name, exc.took), action.before))
                if result.failed is None:
                    result.failed, result.error = action, exc
                if self.independent_objects:
                    continue
                break
            result.applied.append(action)
            if on_applied is not None:
                on_applied(action)
        return result


#: The backend of each `Cluster.scheduler`, by dotted path (imported on first use, so
#: this module imports none of its implementations). `none` has no backend.
BACKENDS: dict[str, str] = {
    "slurm": "gpuquota.schedulers.slurm.backend.SlurmBackend",
    "kubernetes": "gpuquota.schedulers.kubernetes.backend.KubernetesBackend",
}


def backend_options_check(cluster, options: dict) -> None:
    """Refuse options the cluster's backend cannot read (its `options_check`)."""
    if path := BACKENDS.get(cluster.scheduler):
        import_string(path).options_check(options, cluster=cluster)


def backend_class(cluster) -> type[Backend] | None:
    """The backend class of a cluster's scheduler, or None (`none`)."""
    path = BACKENDS.get(cluster.scheduler)
    return import_string(path) if path else None


def backend_classes(clusters) -> dict[type[Backend], list]:
    """The clusters by their backend's class (those whose scheduler has one)."""
    found: dict[type[Backend], list] = {}
    for cluster in clusters:
        if (backend := backend_class(cluster)) is not None:
            found.setdefault(backend, []).append(cluster)
    return found


def backend_for(cluster, config) -> Backend | None:
    """The backend of a cluster, or None when its scheduler has none (`none`)."""
    path = BACKENDS.get(cluster.scheduler)
    return import_string(path)(cluster=cluster, config=config) if path else None
