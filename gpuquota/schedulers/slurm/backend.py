"""The Slurm backend: Slurm's commands (`sacctmgr`, `scontrol`) run by the one runner."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from datetime import datetime

from gpuquota.schedulers.backend import (
    Action,
    Backend,
    BackendError,
    CapabilityReport,
    ForeignUse,
    JobStopped,
    Observed,
    Plan,
    SchedulerObject,
    is_owned,
)
from gpuquota.schedulers.models import ManagedObject
from gpuquota.schedulers.runner import Runner
from gpuquota.schedulers.secrets import secret_decrypt
from gpuquota.schedulers.selectors import plan_inputs
from gpuquota.schedulers.slurm import drain, jobstop, objects, owners, verify
from gpuquota.schedulers.slurm.capabilities import (
    capabilities_report,
    config_parse,
    node_gres_types,
)
from gpuquota.schedulers.slurm.options import SCAVENGER_QOS, SlurmOptions
from gpuquota.schedulers.slurm.plan import plan_build
from gpuquota.schedulers.slurm.rest import SlurmRest
from gpuquota.schedulers.slurm.selectors import slurm_foreign_use


class SlurmBackend(Backend):
    scheduler = "slurm"
    kinds = ("preemptible_qos", "qos", "site_qos", "account", "association", "default_qos",
             "reservation")
    #: A refused object leaves the others worth applying: each refusal is its own problem.
    independent_objects = True

    @classmethod
    def options_check(cls, options: dict, *, cluster) -> None:
        SlurmOptions.parse(options)  # refuses unknown or malformed options

    @classmethod
    def foreign_use(cls, *, clusters, period, team=None) -> list[ForeignUse]:
        """From Slurm's accounting and the GPUs slurmctld said each job held."""
        return slurm_foreign_use(clusters=clusters, period=period, team=team)

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
        self._cluster_name = self.options.cluster_name

    # -- the interface --------------------------------------------------------------------
    def node_drain(self, *, hostname: str, reason: str) -> None:
        drain.node_drain(self.runner, hostname, reason)

    def node_resume(self, *, hostname: str) -> bool:
        return drain.node_resume(self.runner, hostname)

    def job_stop(self, *, job_id: str, namespace: str = "", requeue: bool = False,
                 started_at=None) -> JobStopped:
        return jobstop.job_stop(self.runner, job_id, requeue=requeue, started_at=started_at)

    def node_drain_progress(self, *, hostname: str) -> str:
        return drain.node_drain_progress(self.runner, hostname)

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
        found += objects.accounts_parse(run(
            ["sacctmgr", "-P", "-n", "show", "association", f"cluster={self._cluster()}",
             f"format={objects.ASSOC_FORMAT}"]).stdout)
        found += objects.reservations_parse(
            run(["scontrol", "-o", "show", "reservation"]).stdout)
        return Observed(found)

    def owns(self, obj: SchedulerObject) -> bool:
        """What gpuquota created, as its database recorded when it did, and what bears the
        `gq-` prefix no site object may take (gpuquota.core.names: its reservations, QOS,
        `gq-lending` and its users); never what a description says (a site's flat file can
        write those). A site's own objects, even those gpuquota updates, are never deleted;
        nor is an account's default QOS (a setting, not an object)."""
        if obj.kind == "default_qos":
            return False
        return is_owned(obj.name) or ManagedObject.objects.filter(
            cluster=self.cluster, kind=obj.kind, name=obj.name, created=True).exists()

    def apply_action(self, action: Action) -> None:
        """Run the action's commands, then read the object back: a command Slurm did not
        take (even with exit status 0) raises a BackendError naming it, Slurm's words and
        the fix, with what did take."""
        said = []
        for write in objects.writes(action, cluster=self._cluster()):
            try:
                done = self.runner.run(write.argv)
                said.append((write, verify.words_of(done.stdout, done.stderr)))
            except BackendError as exc:
                if exc.outage:
                    raise
                said.append((write, exc.message))
        if action.verb == "delete" and action.obj.kind == "account":
            self._account_forget(action.obj.name)
        now = self.read_back(action.obj)
        refused = verify.refusals(action, said, now)
        if refused:
            raise verify.refused_error(action, refused, now)

    def _account_forget(self, name: str) -> None:
        """An account gpuquota created and deleted here, with no association left on any
        cluster of the site's accounting: its record deleted too (Slurm keeps it else)."""
        name = objects.name_checked(name)
        left = self.runner.run(["sacctmgr", "-P", "-n", "show", "association", "where",
                                f"account={name}", "format=cluster"]).stdout
        if not left.strip():
            self.runner.run(["sacctmgr", "-i", "delete", "account", "where", f"name={name}"],
                            check=False)

    def read_back(self, obj: SchedulerObject) -> SchedulerObject | None:
        """The object as Slurm has it now (None: not there)."""
        run, cluster = self.runner.run, self._cluster()
        if obj.kind in ("qos", "preemptible_qos", "site_qos"):
            text = run(["sacctmgr", "-P", "-n", "show", "qos", "where",
                        f"name={objects.name_checked(obj.name)}",
                        f"format={objects.QOS_FORMAT}"]).stdout
            found = objects.qos_parse(text) if obj.kind != "site_qos" else [
                SchedulerObject("site_qos", name, {"preempts": SCAVENGER_QOS})
                for name, preempt, *_ in (line.split("|") for line in text.splitlines())
                if SCAVENGER_QOS in preempt.split(",")]
        elif obj.kind == "reservation":
            done = run(["scontrol", "-o", "show", "reservation",
                        objects.name_checked(obj.name)], check=False)
            found = objects.reservations_parse(done.stdout if done.returncode == 0 else "")
        else:
            account, _, user = obj.name.partition("/")
            where = ["where", f"account={objects.name_checked(account)}", f"cluster={cluster}"]
            if user:
                where.append(f"user={objects.name_checked(user)}")
            found = objects.accounts_parse(run(["sacctmgr", "-P", "-n", "show", "association",
                                                *where, f"format={objects.ASSOC_FORMAT}"]).stdout)
        return next((o for o in found if o.key == obj.key), None)

    def render(self, actions: Iterable[Action]) -> list[str]:
        out = []
        for action in actions:
            try:
                out += [shlex.join(argv)
                        for argv in objects.action_argv(action, cluster=self._cluster())]
            except BackendError as exc:
                out.append(f"# {action}: {exc.message}")
        return out

    def remove_actions(self) -> list[Action]:
        """What takes gpuquota off the cluster: every object it created deleted, and every
        setting it changed on the site's own objects put back as the site had it."""
        order = {kind: i for i, kind in enumerate(self.kinds)}
        self.capabilities()  # Slurm's own name of the cluster (ClusterName)
        seen = {o.key: o for o in self.observe().objects}
        actions = []
        for managed in ManagedObject.objects.filter(cluster=self.cluster):
            current = seen.get((managed.kind, managed.name))
            if current is None:
                continue
            if managed.created:
                if managed.kind != "default_qos":  # it goes with its account
                    actions.append(Action("delete", current, before=dict(current.fields)))
            elif managed.site_fields:
                actions.append(Action("update", SchedulerObject(
                    managed.kind, managed.name, dict(managed.site_fields)),
                    before=dict(current.fields)))
        # Deletes last-kind first; the site's settings back before its QOS lose gq-owner.
        removal = {"reservation": 0, "default_qos": 1, "association": 2, "account": 3,
                   "site_qos": 4, "qos": 5, "preemptible_qos": 6}
        return sorted(actions, key=lambda a: (removal.get(a.obj.kind, order[a.obj.kind]),
                                              a.verb == "delete", a.obj.name))

    def export(self, plan: Plan) -> dict[str, str]:
        """`sacctmgr load`'s flat file (the cluster's accounts and users, values quoted)
        and the `scontrol`/`sacctmgr` commands of the reservations and QOS (each argument
        quoted for the shell), in the order they can run on a fresh cluster. An account
        is marked `gq-created` only when gpuquota names it (`gq-lending`)."""
        order = {kind: i for i, kind in enumerate(self.kinds)}
        ordered = sorted(plan.objects, key=lambda o: (order[o.kind], o.name))

        def script(header: list[str], kinds: tuple[str, ...]) -> str:
            lines = ["#!/bin/sh", *header, "set -e"]
            for obj in ordered:
                if obj.kind in kinds:
                    lines += [shlex.join(argv) for argv in
                              objects.action_argv(Action("create", obj), cluster="")]
            return "\n".join(lines) + "\n"

        return {
            "qos.sh": script(["# 1. gpuquota's QOS, the preempted one first (sacctmgr load "
                              "does not create QOS), then a site's QOS made to preempt "
                              "gq-scavenger."], ("preemptible_qos", "qos", "site_qos")),
            "accounts.cfg": export_flat_file(plan, cluster=self._cluster(),
                                             parents=self._parents()),
            "defaults.sh": script(["# 3. after `sacctmgr load accounts.cfg`: each account's "
                                   "default QOS (load does not change an existing account's)."],
                                  ("default_qos",)),
            "reservations.sh": script(["# 4. gpuquota's Slurm reservations; run as "
                                       "SlurmUser."], ("reservation",)),
        }

    def _parents(self) -> dict[str, str]:
        """Each existing account's parent (the flat file keeps it); {} when unreadable."""
        try:
            text = self.runner.run(["sacctmgr", "-P", "-n", "show", "association",
                                    f"cluster={self._cluster()}",
                                    "format=account,user,parentname"]).stdout
        except BackendError:
            return {}
        return {a: p for a, u, p, *_ in (line.split("|") + ["", ""] for line in
                                          text.splitlines() if line.strip()) if not u and p}

    def _cluster(self) -> str:
        return self._cluster_name or self.cluster.slug


def flat_value(value: str) -> str:
    """A value quoted for `sacctmgr load`'s flat file, whose fields `:` separates: in single
    quotes, or double quotes when it holds a single one; never both."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise BackendError(f"{value[:60]!r} cannot be written in sacctmgr's flat file (both "
                       "quotes).")


def export_flat_file(plan: Plan, *, cluster: str, parents: dict[str, str] | None = None
                     ) -> str:
    """The accounts and associations in `sacctmgr dump`'s format, for `sacctmgr load` (step
    2 of the export): each account under its parent as the site has it (`parents`; root
    for a new one), values quoted; the site's existing accounts keep their description and
    organization (only the limit and the QOS are written); users get the QOS added."""
    q, parents = flat_value, parents or {}
    lines = [f"# 2. gpuquota's accounts and users for {cluster}: sacctmgr load <this file>",
             f"Cluster - {q(cluster)}"]
    users: dict[str, list[SchedulerObject]] = {}
    defaults = {o.name: o.fields["defaultqos"] for o in plan.objects if o.kind == "default_qos"}
    for obj in plan.objects:
        if obj.kind == "association":
            users.setdefault(obj.name.partition("/")[0], []).append(obj)
    by_parent: dict[str, list[str]] = {}
    for obj in plan.objects:
        if obj.kind != "account":
            continue
        parts = [f"Account - {q(obj.name)}"]
        if is_owned(obj.name):  # only what gpuquota names is marked as its own
            parts += [f"Description={q(objects.CREATED_DESCRIPTION)}",
                      f"Organization={q('gpuquota')}"]
        if obj.fields.get("grptres"):
            parts.append(f"GrpTRES={q(obj.fields['grptres'])}")
        parts.append(f"QOS={q('+' + obj.fields['gq_qos'])}")
        if obj.name in defaults:
            parts.append(f"DefaultQOS={q(defaults[obj.name])}")
        by_parent.setdefault(parents.get(obj.name, "root"), []).append(":".join(parts))
    for parent, accounts in sorted(by_parent.items(), key=lambda p: p[0] != "root"):
        lines += [f"Parent - {q(parent)}", *accounts]
    for account, members in sorted(users.items()):
        lines.append(f"Parent - {q(account)}")
        lines += [f"User - {q(m.name.partition('/')[2])}:QOS={q('+' + m.fields['gq_qos'])}"
                  for m in sorted(members, key=lambda m: m.name)]
    return "\n".join(lines) + "\n"
