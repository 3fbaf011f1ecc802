"""Reservations, quotas and loans -> the Slurm objects that hold them (pure: no Slurm, no
database), and each reservation's binding level with the reason.

Objects (kind: name -> fields gpuquota manages):

- `preemptible_qos`: `gq-scavenger` (requeued when preempted, GraceTime = the lending
  notice, GrpTRES = the GPUs lent now); `qos`: `gq-owner` (preempts `gq-scavenger`);
- `account`: each team's accounts (GrpTRES per GPU type, `gq-owner` among its QOS; an
  account gpuquota creates is described `gq-created`) and `gq-lending`, the borrowers'
  account (`gq-scavenger` only);
- `association`: `account/user` for each member with a unix identity, in the team's
  accounts (`gq-owner` among the QOS it may use, inherited or added to the user's own
  list) and in `gq-lending` (`gq-scavenger`);
- `default_qos`: each account's default QOS (`gq-owner`; `gq-scavenger` for
  `gq-lending`), set after the associations, never deleted;
- `reservation`: `gq-res-<id>`, the nodes a reservation covers whole (or, from Slurm 23.11,
  its GPUs), for the team's accounts (and `gq-lending` while one of its GPUs is lent).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from gpuquota.core.names import slurm_name_error, unix_user_error
from gpuquota.schedulers.backend import Binding, CapabilityReport, Plan, SchedulerObject, owned_name
from gpuquota.schedulers.models import BindingLevel
from gpuquota.schedulers.selectors import PlanInputs, ReservationInput, TeamInput
from gpuquota.schedulers.slurm.options import (
    LENDING_ACCOUNT,
    OWNER_QOS,
    SCAVENGER_QOS,
    SlurmOptions,
)

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"


def slurm_time(at: datetime) -> str:
    """A UTC instant as Slurm prints it with TZ=UTC (the runner's environment)."""
    return at.astimezone(UTC).strftime(TIME_FORMAT)


def duration_text(seconds: int) -> str:
    """Seconds as sacctmgr prints a GraceTime (`00:05:00`, `1-00:00:00`)."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def tres_text(counts: dict[str, int]) -> str:
    """{'h100': 2} -> `gres/gpu:h100=2` (sorted, so it compares as observed)."""
    return ",".join(f"gres/gpu:{t}={n}" for t, n in sorted(counts.items()))


def plan_build(*, inputs: PlanInputs, caps: CapabilityReport, options: SlurmOptions,
               at: datetime) -> Plan:
    """The objects Slurm should have at `at`, and a binding per held reservation."""
    plan = Plan(at=at)
    types = sorted({options.gres_type(c) for c in inputs.classes})
    lent = defaultdict(int)
    lent_gpus = set()
    for loan in inputs.loans:
        lent_gpus.add(loan.gpu.gpu_id)
        gpu_class = next((r.gpu_class for r in inputs.reservations
                          if r.id == loan.reservation_id), None)
        if gpu_class:
            lent[options.gres_type(gpu_class)] += 1
    lending = bool(caps.facts.get("preemption"))

    plan.objects.append(SchedulerObject("qos", OWNER_QOS, {"preempt": SCAVENGER_QOS}))
    scavenger = {"preemptmode": "REQUEUE", "gracetime": duration_text(options.loan_grace_s)}
    if types:  # before the first GPU is registered there is no limit to write
        scavenger["grptres"] = tres_text({t: (lent[t] if lending else 0) for t in types})
    plan.objects.append(SchedulerObject("preemptible_qos", SCAVENGER_QOS, scavenger))
    _account(plan, LENDING_ACCOUNT, {"gq_qos": SCAVENGER_QOS}, SCAVENGER_QOS)
    for team in inputs.teams.values():
        accounts = [a for a in team.accounts if not slurm_name_error(a, what="account")]
        users = [u for u in team.users if not unix_user_error(u)]
        if not accounts:  # a team known here only by a Kubernetes namespace
            continue
        allowed = {t: 0 for t in types}
        for gpu_class in inputs.classes:
            key = (team.id, gpu_class)
            allowed[options.gres_type(gpu_class)] += max(
                inputs.reserved_now.get(key, 0), inputs.quota_now.get(key, 0))
        for account in accounts:
            fields = {"gq_qos": OWNER_QOS, **({"grptres": tres_text(allowed)} if types else {})}
            _account(plan, account, fields, OWNER_QOS)
            for user in users:
                plan.objects.append(SchedulerObject("association", f"{account}/{user}",
                                                    {"gq_qos": OWNER_QOS}))
        for user in users:
            plan.objects.append(SchedulerObject("association", f"{LENDING_ACCOUNT}/{user}",
                                                {"gq_qos": SCAVENGER_QOS}))

    for r in inputs.reservations:
        team = inputs.teams.get(r.team_id)
        binding, obj = reservation_binding(
            r, team=team, caps=caps, options=options, node_gpus=inputs.node_gpus,
            lent=lending and any(g.gpu_id in lent_gpus for g in r.gpus), at=at,
        )
        plan.bindings[r.id] = binding
        if obj is not None:
            plan.objects.append(obj)
    plan.objects = _unique(plan.objects)
    return plan


def _account(plan: Plan, name: str, fields: dict, default_qos: str) -> None:
    """An account, and its default QOS (`default_qos`), set after its users' associations
    may use that QOS: Slurm refuses a default some of them cannot use."""
    plan.objects.append(SchedulerObject("account", name, fields))
    plan.objects.append(SchedulerObject("default_qos", name, {"defaultqos": default_qos}))


def _unique(objects: list[SchedulerObject]) -> list[SchedulerObject]:
    seen, out = set(), []
    for obj in objects:
        if obj.key not in seen:
            seen.add(obj.key)
            out.append(obj)
    return out


def whole_nodes(r: ReservationInput, node_gpus: dict[str, int]) -> tuple[list[str], int]:
    """The nodes all of whose GPUs this reservation holds, and its GPUs elsewhere."""
    per_node = defaultdict(int)
    for gpu in r.gpus:
        per_node[gpu.node] += 1
    whole = sorted(n for n, count in per_node.items() if count >= node_gpus.get(n, 0) > 0)
    return whole, sum(c for n, c in per_node.items() if n not in whole)


def reservation_binding(
    r: ReservationInput, *, team: TeamInput | None, caps: CapabilityReport,
    options: SlurmOptions, node_gpus: dict[str, int], lent: bool, at: datetime,
) -> tuple[Binding, SchedulerObject | None]:
    """How strongly Slurm can hold `r`, why, and the reservation object that holds it."""
    version = caps.version
    if team is None or not team.accounts:
        return Binding(BindingLevel.ADVISORY, "The team has no Slurm account on this cluster "
                       "(add one as its cluster identity): nothing is enforced."), None
    gres_type = options.gres_type(r.gpu_class)
    accounts = sorted({*team.accounts, *([LENDING_ACCOUNT] if lent else [])})
    name = owned_name("res", r.id)
    fields = {"accounts": ",".join(accounts), "endtime": slurm_time(r.end),
              "flags": options.reservation_flags}
    if r.start > at:
        fields["starttime"] = slurm_time(r.start)
    limited = bool(caps.facts.get("limits_enforced")) and (
        f"gres/gpu:{gres_type}" in caps.facts.get("tres", []))
    nodes = sorted({options.node_name(g.node) for g in r.gpus})
    if caps.facts.get("gres_reservations"):
        fields.update(nodes=",".join(nodes), tres=f"gres/gpu:{gres_type}={len(r.gpus)}")
        why = (f"Slurm {version} reserves the {len(r.gpus)} GPUs themselves on "
               f"{', '.join(nodes)} for {', '.join(team.accounts)}.")
        if "leak" in " ".join(caps.notes):
            why += " Before 25.05.3 such reservations could leak GPUs to other jobs."
        return Binding(BindingLevel.EXACT_GPUS, why, name), SchedulerObject(
            "reservation", name, fields)
    whole, shared = whole_nodes(r, node_gpus)
    if whole and not shared:
        slurm_nodes = [options.node_name(n) for n in whole]
        fields["nodes"] = ",".join(slurm_nodes)
        return Binding(BindingLevel.WHOLE_NODES, (
            f"Slurm {version} cannot reserve single GPUs; the reservation covers "
            f"{', '.join(slurm_nodes)} whole, reserved for {', '.join(team.accounts)} only."
        ), name), SchedulerObject("reservation", name, fields)
    if limited:
        why = (f"Slurm {version} cannot reserve single GPUs and these GPUs share nodes with "
               f"others', so only {', '.join(team.accounts)}'s GPU limit (GrpTRES "
               f"gres/gpu:{gres_type}) is enforced, not which GPUs it uses.")
        if whole:
            fields["nodes"] = ",".join(options.node_name(n) for n in whole)
            return Binding(BindingLevel.QUOTA, why + f" {', '.join(whole)} are reserved whole.",
                           name), SchedulerObject("reservation", name, fields)
        return Binding(BindingLevel.QUOTA, why), None
    reasons = []
    if not caps.facts.get("limits_enforced"):
        reasons.append("AccountingStorageEnforce has no 'limits'")
    if f"gres/gpu:{gres_type}" not in caps.facts.get("tres", []):
        reasons.append(f"AccountingStorageTRES does not track gres/gpu:{gres_type}")
    return Binding(BindingLevel.ADVISORY, (
        "Nothing holds it: the GPUs share nodes with others' and " + "; ".join(reasons) + "."
    )), None
