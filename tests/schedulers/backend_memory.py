"""A scheduler kept in memory, implementing the backend interface: it tests the reconcile
loop itself (drift, failures, idempotence); the Slurm backend is tested against Slurm."""

from gpuquota.schedulers.backend import (
    Backend,
    BackendError,
    Binding,
    CapabilityReport,
    Observed,
    Plan,
    SchedulerObject,
    owned_name,
)
from gpuquota.schedulers.models import BindingLevel
from gpuquota.schedulers.selectors import plan_inputs
from gpuquota.schedulers.slurm.backend import SlurmBackend

#: The "scheduler": (kind, name) -> fields; tests edit it as a human would.
STORE: dict[tuple[str, str], dict] = {}
FAIL_ON: set[tuple[str, str]] = set()  # actions on these keys are refused
DOWN: list[bool] = [False]


class MemoryBackend(Backend):
    scheduler = "slurm"
    kinds = ("account", "hold")

    @classmethod
    def options_check(cls, options: dict, *, cluster) -> None:
        """A Slurm cluster's options, as the backend it stands in for reads them."""
        SlurmBackend.options_check(options, cluster=cluster)

    @classmethod
    def foreign_use(cls, *, clusters, period, team=None):
        """A Slurm cluster's foreign use, from the records of the Slurm it stands in for."""
        return SlurmBackend.foreign_use(clusters=clusters, period=period, team=team)

    def capabilities(self) -> CapabilityReport:
        return CapabilityReport(version="mem-1", best_binding=BindingLevel.QUOTA)

    def plan(self, at, *, capabilities) -> Plan:
        inputs = plan_inputs(cluster=self.cluster, at=at)
        plan = Plan(at=at)
        for team in inputs.teams.values():
            plan.objects.append(SchedulerObject("account", owned_name(team.slug),
                                                {"users": ",".join(team.users)}))
        for r in inputs.reservations:
            name = owned_name("res", r.id)
            plan.objects.append(SchedulerObject("hold", name, {"gpus": str(len(r.gpus))}))
            plan.bindings[r.id] = Binding(BindingLevel.QUOTA, "memory holds counts", name)
        return plan

    def observe(self) -> Observed:
        if DOWN[0]:
            raise BackendError("the scheduler does not answer", detail="connection refused")
        return Observed([SchedulerObject(k, n, dict(f)) for (k, n), f in STORE.items()])

    def apply_action(self, action) -> None:
        key = action.obj.key
        if key in FAIL_ON:
            raise BackendError(f"refused {key[1]}", detail="permission denied")
        if action.verb == "delete":
            del STORE[key]
        else:
            STORE[key] = dict(action.obj.fields)

    def render(self, actions) -> list[str]:
        return [f"mem {a.verb} {a.obj.kind} {a.obj.name} "
                + " ".join(f"{k}={v}" for k, v in sorted(a.obj.fields.items()))
                for a in actions]
