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


def accounts_parse(assoc_text: str) -> list[SchedulerObject]:
    """Accounts with the fields gpuquota manages (GrpTRES, its QOS), their default QOS
    (`default_qos`, set once the users may use it), and user associations (the `gq-` QOS
    they may use, inherited or their own list)."""
    objects = []
    for account, user, grptres, qos, default_qos in _rows(assoc_text, 5, "association"):
        if user:
            objects.append(SchedulerObject("association", f"{account}/{user}",
                                           {"gq_qos": gq_qos(qos)}))
            continue
        fields = {"gq_qos": gq_qos(qos)}
        if account != LENDING_ACCOUNT:
            fields["grptres"] = gpu_tres(grptres)
        objects.append(SchedulerObject("account", account, fields))
        objects.append(SchedulerObject("default_qos", account, {"defaultqos": default_qos}))
    return objects


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


def _set(fields: dict, changed, before: dict | None = None) -> list[str]:
    """`key=value` settings; `before` (what Slurm has) says which `gq-` QOS and which GPU
    limits to take away (`qos-=`, `=-1`: Slurm's way to clear one), to put a site's back."""
    out, before = [], before or {}
    for key in sorted(changed):
        value = fields[key]
        if key == "gq_qos":
            old = {q for q in before.get(key, "").split(",") if q}
            new = [q for q in value.split(",") if q]
            out += [f"qos+={q}" for q in new] + [f"qos-={q}" for q in sorted(old - set(new))]
        elif key == "grptres" and before.get(key):
            new = dict(p.split("=", 1) for p in value.split(",") if p)
            gone = [p.split("=", 1)[0] for p in before[key].split(",") if p]
            parts = [f"{k}={v}" for k, v in new.items()] + [
                f"{k}=-1" for k in gone if k not in new]
            out.append(f"grptres={','.join(parts)}")
        elif key == "defaultqos" and not value:
            out.append("defaultqos=-1")
        elif key == "gracetime":
            out.append(f"gracetime={_seconds(value)}")
        else:
            out.append(f"{key}={value}")
    return out


#: Characters that would split a name into several objects or run as shell code.
_SPLITS = re.compile(r"[\s,=:;'\"`$|&<>()\\*?\[\]{}!#~%]")


def name_checked(name: str, *, what: str = "name") -> str:
    """`name` as it may go into a command's argument: never one that would split into
    several objects (`eve,root`), read as an option (`-x`) or run as shell code. Names are
    checked where they enter (gpuquota.core.names); this is the last line of defence."""
    if not isinstance(name, str) or not name or name.startswith("-") or _SPLITS.search(name):
        raise BackendError(f"Refused to write the Slurm {what} {str(name)[:60]!r}: it would "
                           "split into several objects or run as code. Rename it where it "
                           "was entered (the cluster identity).")
    return name


@dataclass(frozen=True)
class Write:
    """One command and the fields of its object that it sets (read back after it)."""

    argv: list[str]
    keys: tuple[str, ...] = ()


def writes(action: Action, *, cluster: str) -> list[Write]:
    """The commands that perform one action, each with the fields it sets: limits apart
    from QOS, so that Slurm refusing one leaves the others written."""
    obj, verb = action.obj, action.verb
    changed = sorted(k for k, v in obj.fields.items() if action.before.get(k) != v)
    if verb == "create":
        changed = sorted(obj.fields)
    where_cluster = f"cluster={name_checked(cluster, what='cluster')}" if cluster else ""
    where = [where_cluster] if cluster else []
    if obj.kind in ("qos", "preemptible_qos"):
        name = name_checked(obj.name, what="QOS")
        if verb == "create":
            return [Write(["sacctmgr", "-i", "add", "qos", name, *_set(obj.fields, changed)],
                          tuple(changed))]
        if verb == "update":
            return [Write(["sacctmgr", "-i", "modify", "qos", "where", f"name={name}", "set",
                           *_set(obj.fields, changed)], tuple(changed))]
        return [Write(["sacctmgr", "-i", "delete", "qos", "where", f"name={name}"])]
    if obj.kind == "site_qos":  # a site's QOS made to preempt gq-scavenger (its owners')
        name = name_checked(obj.name, what="QOS")
        sign = "-" if verb == "delete" else "+"
        return [Write(["sacctmgr", "-i", "modify", "qos", "where", f"name={name}", "set",
                       f"preempt{sign}={SCAVENGER_QOS}"], () if verb == "delete" else
                      ("preempts",))]
    if obj.kind in ("account", "default_qos"):
        name = name_checked(obj.name, what="account")
        modify = ["sacctmgr", "-i", "modify", "account", "where", f"name={name}", *where, "set"]
        if obj.kind == "default_qos":  # never created nor deleted: the account's setting
            return [Write([*modify, *_set(obj.fields, ["defaultqos"], action.before)],
                          ("defaultqos",))]
        if verb == "delete":
            return [Write(["sacctmgr", "-i", "delete", "account", "where", f"name={name}",
                           *where])]
        out = []
        if verb == "create":
            out.append(Write(["sacctmgr", "-i", "add", "account", name, *where,
                              f"description={CREATED_DESCRIPTION}", "organization=gpuquota"]))
        # One command per setting: a refused QOS change never takes the limit with it.
        out += [Write([*modify, *_set(obj.fields, [k], action.before)], (k,))
                for k in changed]
        return out
    if obj.kind == "association":
        account, _, user = obj.name.partition("/")
        account = name_checked(account, what="account")
        user = name_checked(user, what="user")
        if verb == "delete":
            return [Write(["sacctmgr", "-i", "delete", "user", "where", f"name={user}",
                           f"account={account}", *where])]
        out = []
        if verb == "create":  # it inherits the account's QOS: read back, never set
            out.append(Write(["sacctmgr", "-i", "add", "user", user, f"account={account}",
                              *where], tuple(changed)))
        else:
            out += [Write(["sacctmgr", "-i", "modify", "user", "where", f"name={user}",
                           f"account={account}", *where, "set",
                           *_set(obj.fields, [k], action.before)], (k,))
                    for k in changed]
        return out
    if obj.kind == "reservation":
        name_checked(obj.name, what="reservation")
        for key in ("accounts", "nodes"):
            for part in obj.fields.get(key, "").split(","):
                if part:
                    name_checked(part, what=key[:-1])
        return [Write(_reservation_argv(action, set(changed)), tuple(changed))]
    raise ValueError(f"unknown kind {obj.kind!r}")


def action_argv(action: Action, *, cluster: str) -> list[list[str]]:
    """The commands that perform one action (the argv lists of `writes`)."""
    return [w.argv for w in writes(action, cluster=cluster)]


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
