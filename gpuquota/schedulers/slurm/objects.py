"""Slurm's answers -> SchedulerObjects (observe), and actions -> the argv lists that perform
them (apply, the dry run and the export). Parsed from `sacctmgr -P` (pipe-separated) and
`scontrol -o` (one record per line); Slurm 22.05 has no JSON for either. Also the GPUs
running jobs hold (`scontrol -d -o show job`, slurmrestd's `gres_detail`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuquota.schedulers.backend import Action, BackendError, SchedulerObject
from gpuquota.schedulers.slurm.options import LENDING_ACCOUNT, SCAVENGER_QOS

QOS_FORMAT = "name,preempt,preemptmode,gracetime,grptres"
ASSOC_FORMAT = "account,user,grptres,qos,defaultqos"
ACCOUNT_FORMAT = "account,description"
CREATED_DESCRIPTION = "gq-created"
#: Reservation flags Slurm adds by itself, never planned.
IMPLIED_FLAGS = {"SPEC_NODES", "ALL_NODES", "IGNORE_JOBS"}


def _rows(text: str, width: int, what: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) < width:
            raise BackendError(f"sacctmgr's {what} list is malformed", detail=text[:2000])
        rows.append(cells[:width])
    return rows


def gpu_tres(value: str) -> str:
    """Only the `gres/gpu:<type>=N` parts of a TRES list, sorted."""
    return ",".join(sorted(p for p in value.split(",") if p.startswith("gres/gpu:")))


def gq_qos(value: str) -> str:
    return ",".join(sorted(q for q in value.split(",") if q.startswith("gq-")))


def qos_parse(text: str) -> list[SchedulerObject]:
    objects = []
    for name, preempt, mode, grace, grptres in _rows(text, 5, "QOS"):
        if not name.startswith("gq-"):
            continue
        kind = "qos" if preempt else "preemptible_qos"
        fields = {"preempt": preempt} if preempt else {
            "preemptmode": mode.upper(), "gracetime": grace, "grptres": gpu_tres(grptres)}
        objects.append(SchedulerObject(kind, name, fields))
    return objects


def accounts_parse(accounts_text: str, assoc_text: str) -> tuple[list[SchedulerObject], set[str]]:
    """Accounts with the fields gpuquota manages, user associations, and the accounts
    gpuquota created (described `gq-...`)."""
    owned = {a for a, desc in _rows(accounts_text, 2, "account")
             if desc.startswith("gq-") or a == LENDING_ACCOUNT}
    objects = []
    for account, user, grptres, qos, default_qos in _rows(assoc_text, 5, "association"):
        if user:
            objects.append(SchedulerObject("association", f"{account}/{user}"))
        else:
            fields = {"gq_qos": gq_qos(qos), "defaultqos": default_qos}
            if account != LENDING_ACCOUNT:
                fields["grptres"] = gpu_tres(grptres)
            objects.append(SchedulerObject("account", account, fields))
    return objects, owned


def hostlist_expand(value: str) -> list[str]:
    """`gqnode[1-2],gpu07` -> ['gqnode1', 'gqnode2', 'gpu07'] (Slurm's compressed lists)."""
    names = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", value):
        if plain:
            names.append(plain)
            continue
        for part in ranges.split(","):
            start, _, end = part.partition("-")
            if not (start.isdigit() and (end or start).isdigit()):
                names.append(f"{prefix}[{part}]")  # not a Slurm range: kept as written
                continue
            for n in range(int(start), int(end or start) + 1):
                names.append(f"{prefix}{n:0{len(start)}d}")
    return names


def reservations_parse(text: str) -> list[SchedulerObject]:
    objects = []
    for line in text.splitlines():
        record = dict(re.findall(r"(\w+)=(\S*)", line))
        name = record.get("ReservationName", "")
        if not name.startswith("gq-"):
            continue
        flags = [f for f in record.get("Flags", "").split(",") if f and f not in IMPLIED_FLAGS]
        fields = {
            "nodes": ",".join(sorted(hostlist_expand(record.get("Nodes", "")))),
            "accounts": ",".join(sorted(a for a in record.get("Accounts", "").split(",")
                                        if a and a != "(null)")),
            "starttime": record.get("StartTime", ""),
            "endtime": record.get("EndTime", ""),
            "flags": ",".join(sorted(flags)),
        }
        tres = gpu_tres(record.get("TRES", ""))
        if tres:
            fields["tres"] = tres
        objects.append(SchedulerObject("reservation", name, fields))
    return objects


def _seconds(duration: str) -> int:
    days, _, clock = duration.rpartition("-")
    h, m, s = (int(p) for p in clock.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def _set(fields: dict, changed: set[str]) -> list[str]:
    out = []
    for key in sorted(changed):
        value = fields[key]
        if key == "gq_qos":
            out += [f"qos+={q}" for q in value.split(",") if q]
        elif key == "gracetime":
            out.append(f"gracetime={_seconds(value)}")
        else:
            out.append(f"{key}={value}")
    return out


def action_argv(action: Action, *, cluster: str) -> list[list[str]]:
    """The commands that perform one action (one or two argv lists)."""
    obj, verb = action.obj, action.verb
    if obj.kind == "site_qos":  # gpuquota.schedulers.slurm.owners
        return [["sacctmgr", "-i", "modify", "qos", "where", f"name={obj.name}", "set",
                 f"preempt{'-' if verb == 'delete' else '+'}={SCAVENGER_QOS}"]]
    changed = {k for k, v in obj.fields.items() if action.before.get(k) != v}
    where_cluster = f"cluster={cluster}"
    if obj.kind in ("qos", "preemptible_qos"):
        if verb == "create":
            return [["sacctmgr", "-i", "add", "qos", obj.name, *_set(obj.fields, set(obj.fields))]]
        if verb == "update":
            return [["sacctmgr", "-i", "modify", "qos", "where", f"name={obj.name}", "set",
                     *_set(obj.fields, changed)]]
        return [["sacctmgr", "-i", "delete", "qos", "where", f"name={obj.name}"]]
    if obj.kind == "account":
        modify = ["sacctmgr", "-i", "modify", "account", "where", f"name={obj.name}",
                  where_cluster, "set"]
        if verb == "create":
            return [["sacctmgr", "-i", "add", "account", obj.name, where_cluster,
                     f"description={CREATED_DESCRIPTION}", "organization=gpuquota"],
                    [*modify, *_set(obj.fields, set(obj.fields))]]
        if verb == "update":
            return [[*modify, *_set(obj.fields, changed)]]
        return [["sacctmgr", "-i", "delete", "account", "where", f"name={obj.name}",
                 where_cluster]]
    if obj.kind == "association":
        account, _, user = obj.name.partition("/")
        if verb == "create":
            return [["sacctmgr", "-i", "add", "user", user, f"account={account}", where_cluster]]
        return [["sacctmgr", "-i", "delete", "user", "where", f"name={user}",
                 f"account={account}", where_cluster]]
    if obj.kind == "reservation":
        return [_reservation_argv(action, changed)]
    raise ValueError(f"unknown kind {obj.kind!r}")


def _reservation_argv(action: Action, changed: set[str]) -> list[str]:
    obj = action.obj
    if action.verb == "delete":
        return ["scontrol", "delete", f"ReservationName={obj.name}"]
    names = {"nodes": "Nodes", "accounts": "Accounts", "starttime": "StartTime",
             "endtime": "EndTime", "flags": "Flags", "tres": "TRES"}
    if action.verb == "create":
        argv = ["scontrol", "create", "reservation", f"ReservationName={obj.name}",
                f"StartTime={obj.fields.get('starttime', 'now')}"]
        keys = [k for k in ("endtime", "nodes", "tres", "accounts") if k in obj.fields]
        argv += [f"{names[k]}={obj.fields[k]}" for k in keys]
        # Running jobs of others do not stop the reservation; they finish, then it holds.
        return argv + [f"Flags={','.join(filter(None, [obj.fields.get('flags'), 'IGNORE_JOBS']))}"]
    argv = ["scontrol", "update", f"ReservationName={obj.name}"]
    return argv + [f"{names[k]}={obj.fields[k]}" for k in sorted(changed)]


_GPU_IDX = re.compile(r"(?:^|[,\s=])gpu(?::[^:(),\s]+)*(?:\((?!IDX:)[^)]*\))*\(IDX:([^)]*)\)")


def gres_indices(text: str) -> tuple[int, ...]:
    """The GPU indices in a job's per-node GRES detail, as slurmrestd's `gres_detail` and
    `scontrol -d show job` print them: `gpu:h100:2(IDX:0,2-3)` -> (0, 2, 3); () without
    any (`IDX:N/A`, no GPU)."""
    found: set[int] = set()
    for spec in _GPU_IDX.findall(text or ""):
        for part in spec.split(","):
            start, _, end = part.strip().partition("-")
            if start.isdigit() and (end or start).isdigit():
                found.update(range(int(start), int(end or start) + 1))
    return tuple(sorted(found))


@dataclass(frozen=True)
class RunningGpu:
    """One GPU a running job holds, as slurmctld says (its `IDX:` on that node)."""

    job_id: str
    account: str
    user: str
    node: str
    index: int


NODE_DETAIL_RE = re.compile(r"(?<![\w/])Nodes=(\S+) CPU_IDs=\S* Mem=\S* GRES=(\S*)")


def running_gpus_parse(text: str) -> list[RunningGpu]:
    """`scontrol -d -o show job` (one job per line) -> the GPUs of its RUNNING jobs."""
    found = []
    for line in text.splitlines():
        record = dict(re.findall(r"(?<![\w/])(JobId|JobState|Account|UserId)=(\S*)", line))
        if record.get("JobState") != "RUNNING" or "JobId" not in record:
            continue
        user = record.get("UserId", "").split("(")[0]
        for nodes, gres in NODE_DETAIL_RE.findall(line):
            for node in hostlist_expand(nodes):
                found += [RunningGpu(record["JobId"], record.get("Account", ""), user, node, i)
                          for i in gres_indices(gres)]
    return found
