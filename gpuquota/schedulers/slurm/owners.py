"""Owners take their lent GPUs back as they submit today (docs/slurm.md, "Lending").

A site's users already carry their own QOS list and default QOS (`DefaultQOS=normal`), and
their jobs run under that default, which preempts nothing: they could never take a lent
GPU back from a borrower (`gq-scavenger`) unless they passed `--qos=gq-owner`. So gpuquota
adds `gq-scavenger` to the preempt list of the default QOS of every user association in a
team's accounts (`sacctmgr modify qos where name=normal set preempt+=gq-scavenger`), and of
nothing else: the users' associations, QOS lists, defaults and the QOS's other settings
are left as they are.

An object of kind `site_qos` named after the site's QOS stands for "this QOS preempts
gq-scavenger": observed where its preempt list has it, created with `preempt+=`, deleted
(once gpuquota added it and no team's users default to it any more, or on `--remove`)
with `preempt-=`. A preempt list the site set by hand is never taken from it.
"""

from __future__ import annotations

from gpuquota.schedulers.backend import SchedulerObject
from gpuquota.schedulers.slurm.options import SCAVENGER_QOS

KIND = "site_qos"
#: The associations as the backend's observe reads them (objects.ASSOC_FORMAT).
ASSOC_FORMAT = "account,user,grptres,qos,defaultqos"


def owners_default_qos(assoc_text: str, accounts: set[str]) -> list[str]:
    """The default QOS (not gpuquota's own) the users of `accounts` submit under:
    `sacctmgr -P -n show association format=account,user,grptres,qos,defaultqos`, a user's
    own default, else its account's."""
    account_default: dict[str, str] = {}
    users: list[tuple[str, str]] = []
    for line in assoc_text.splitlines():
        cells = line.split("|")
        if len(cells) < 5 or cells[0] not in accounts:
            continue
        account, user, default = cells[0], cells[1], cells[4]
        if user:
            users.append((account, default))
        else:
            account_default[account] = default
    found = {default or account_default.get(account, "") for account, default in users}
    return sorted(q for q in found if q and not q.startswith("gq-"))


def site_qos_objects(names: list[str]) -> list[SchedulerObject]:
    """The plan's: each of these site QOS preempts gq-scavenger."""
    return [SchedulerObject(KIND, name, {"preempts": SCAVENGER_QOS}) for name in names]


def site_qos_parse(qos_text: str) -> list[SchedulerObject]:
    """`sacctmgr -P -n show qos format=name,preempt,...` -> the site's QOS (not `gq-`) whose
    preempt list has gq-scavenger."""
    found = []
    for line in qos_text.splitlines():
        cells = line.split("|")
        if len(cells) >= 2 and cells[0] and not cells[0].startswith("gq-") and (
                SCAVENGER_QOS in cells[1].split(",")):
            found.append(SchedulerObject(KIND, cells[0], {"preempts": SCAVENGER_QOS}))
    return found
