"""The Slurm backend: Slurm's commands (`sacctmgr`, `scontrol`) run by the one runner."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from gpuquota.schedulers.backend import (
    Action,
    Backend,
    BackendError,
    CapabilityReport,
    Observed,
    Plan,
    SchedulerObject,
    is_owned,
)
from gpuquota.schedulers.models import ManagedObject
from gpuquota.schedulers.runner import Runner
from gpuquota.schedulers.secrets import secret_decrypt
from gpuquota.schedulers.selectors import plan_inputs
from gpuquota.schedulers.slurm import objects, owners
from gpuquota.schedulers.slurm.capabilities import (
    capabilities_report,
    config_parse,
    node_gres_types,
)
from gpuquota.schedulers.slurm.options import SlurmOptions
from gpuquota.schedulers.slurm.plan import plan_build
from gpuquota.schedulers.slurm.rest import SlurmRest


class SlurmBackend(Backend):
    scheduler = "slurm"
    kinds = ("preemptible_qos", "qos", "site_qos", "account", "association", "reservation")

    @classmethod
    def options_check(cls, options: dict, *, cluster) -> None:
        SlurmOptions.parse(options)  # refuses unknown or malformed options

    def __init__(self, *, cluster, config):
        super().__init__(cluster=cluster, config=config)
        self.options = SlurmOptions.parse(config.options)
        env = []
        token = secret_decrypt(config.token_encrypted)
        if token:  # slurmrestd's and the commands' JWT (auth/jwt)
            env.append(("SLURM_JWT", token))
        if self.options.slurm_conf:
            env.append(("SLURM_CONF", self.options.slurm_conf))
        self.runner = Runner(commands_dir=config.commands_dir,
                             timeout_s=config.command_timeout_s, env=tuple(env))
        #: Job accounting is read through slurmrestd when the cluster has its URL.
        self.rest = SlurmRest(url=config.api_url, user=self.options.rest_user, token=token,
                              timeout_s=config.command_timeout_s) if config.api_url else None
        self._owned_accounts: set[str] = set()
        self._cluster_name = self.options.cluster_name

    # -- the interface --------------------------------------------------------------------
    def capabilities(self) -> CapabilityReport:
        config = config_parse(self.runner.run(["scontrol", "show", "config"]).stdout)
        nodes = node_gres_types(self.runner.run(["scontrol", "-o", "show", "node"]).stdout)
        self._cluster_name = self._cluster_name or config.get("cluster_name", "")
        rest_error = ""
        if self.rest is not None:
            try:
                self.rest.version()
            except BackendError as exc:  # the writes still work: it is a note, not a failure
                rest_error = exc.message
        return capabilities_report(config, nodes, rest_url=self.rest.url if self.rest else "",
                                   rest_error=rest_error)

    def plan(self, at: datetime, *, capabilities: CapabilityReport) -> Plan:
        inputs = plan_inputs(cluster=self.cluster, at=at)
        plan = plan_build(inputs=inputs, caps=capabilities, options=self.options, at=at)
        if capabilities.facts.get("preemption"):  # the owners' own QOS preempt borrowers
            accounts = {a for team in inputs.teams.values() for a in team.accounts}
            plan.objects += owners.site_qos_objects(owners.owners_default_qos(
                self.runner.run(["sacctmgr", "-P", "-n", "show", "association",
                                 f"cluster={self._cluster()}",
                                 f"format={owners.ASSOC_FORMAT}"]).stdout, accounts))
        return plan

    def observe(self) -> Observed:
        run = self.runner.run
        qos = run(["sacctmgr", "-P", "-n", "show", "qos", f"format={objects.QOS_FORMAT}"]).stdout
        found = objects.qos_parse(qos) + owners.site_qos_parse(qos)
        accounts, self._owned_accounts = objects.accounts_parse(
            run(["sacctmgr", "-P", "-n", "show", "account",
                 f"format={objects.ACCOUNT_FORMAT}"]).stdout,
            run(["sacctmgr", "-P", "-n", "show", "association", f"cluster={self._cluster()}",
                 f"format={objects.ASSOC_FORMAT}"]).stdout,
        )
        found += accounts
        found += objects.reservations_parse(
            run(["scontrol", "-o", "show", "reservation"]).stdout)
        return Observed(found)

    def owns(self, obj: SchedulerObject) -> bool:
        """`gq-` QOS and reservations; accounts gpuquota created (described `gq-...`); the
        associations it created and the preemptions it gave a site's QOS (recorded as
        applied). A site's own are never deleted."""
        if obj.kind == "account":
            return obj.name in self._owned_accounts
        if obj.kind in ("association", owners.KIND):
            return ManagedObject.objects.filter(
                cluster=self.cluster, kind=obj.kind, name=obj.name).exists()
        return is_owned(obj.name)

    def apply_action(self, action: Action) -> None:
        for argv in objects.action_argv(action, cluster=self._cluster()):
            self.runner.run(argv)

    def render(self, actions: Iterable[Action]) -> list[str]:
        return [" ".join(argv) for action in actions
                for argv in objects.action_argv(action, cluster=self._cluster())]

    def export(self, plan: Plan) -> dict[str, str]:
        """`sacctmgr load`'s flat file (QOS, then the cluster's accounts and users) and the
        `scontrol` commands of the reservations, for sites that apply them themselves."""
        return {
            "accounts.cfg": export_flat_file(plan, cluster=self._cluster()),
            "reservations.sh": "\n".join(
                ["#!/bin/sh", "# gpuquota's Slurm reservations; run as SlurmUser.", "set -e"]
                + [" ".join(argv) for obj in plan.objects if obj.kind == "reservation"
                   for argv in objects.action_argv(Action("create", obj), cluster="")]
            ) + "\n",
            "qos.sh": "\n".join(
                ["#!/bin/sh", "# gpuquota's QOS (sacctmgr load does not create QOS).", "set -e"]
                + [" ".join(argv) for obj in plan.objects if obj.kind.endswith("qos")
                   for argv in objects.action_argv(Action("create", obj), cluster="")]
            ) + "\n",
        }

    def _cluster(self) -> str:
        return self._cluster_name or self.cluster.slug


def export_flat_file(plan: Plan, *, cluster: str) -> str:
    """The accounts and associations in `sacctmgr dump`'s format, for `sacctmgr load`."""
    lines = [f"# gpuquota's accounts and users for {cluster}; sacctmgr load <this file>",
             f"Cluster - '{cluster}'", "Parent - 'root'"]
    users: dict[str, list[str]] = {}
    for obj in plan.objects:
        if obj.kind == "association":
            account, _, user = obj.name.partition("/")
            users.setdefault(account, []).append(user)
    for obj in plan.objects:
        if obj.kind != "account":
            continue
        parts = [f"Account - '{obj.name}'", f"Description='{objects.CREATED_DESCRIPTION}'",
                 "Organization='gpuquota'"]
        if obj.fields.get("grptres"):
            parts.append(f"GrpTRES={obj.fields['grptres']}")
        parts += [f"QOS='+{obj.fields['gq_qos']}'", f"DefaultQOS='{obj.fields['defaultqos']}'"]
        lines.append(":".join(parts))
    for account, members in sorted(users.items()):
        lines.append(f"Parent - '{account}'")
        lines += [f"User - '{user}'" for user in sorted(members)]
    return "\n".join(lines) + "\n"
