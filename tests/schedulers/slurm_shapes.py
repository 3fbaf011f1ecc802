"""Site shapes for the live Slurm tests: the dev cluster's accounting set up the way sites
have it before gpuquota writes anything (issue 27), with `sacctmgr` as a site admin would.

- `shape_bare(live)`: back to the cluster as it started (no job, no reservation, no user,
  account or QOS but Slurm's own `root` and `normal`); shape (a), today's, is this.
- `shape_b(live)`: users with their own QOS list and `DefaultQOS=normal`, the team accounts
  `vision` and `nlp` pre-existing under a site parent account `site`, a site QOS named
  `scavenger`.

Every shape starts from `shape_bare`, so a module can put the session's one cluster in its
shape and give it back bare (`shape_bare` again) for the next module.
"""

from __future__ import annotations

import re
import subprocess
import time

from tests.schedulers.slurm_cluster import Live, devcluster

SITE_PARENT = "site"
SITE_QOS = "scavenger"
#: shape (b)'s team accounts and their users (existing system users, so jobs run).
SHAPE_B_TEAMS = {"vision": ("daemon",), "nlp": ("nobody",)}
SLURM_OWN = {"accounts": {"root"}, "users": {"root"}, "qos": {"normal"}}


def sacctmgr(live: Live, *args: str) -> str:
    """`sacctmgr -i ...`; fails the test on a non-zero exit or on the words Slurm prints
    when it refuses with exit 0 (stderr)."""
    done = subprocess.run(["sacctmgr", "-i", *args], env=live.env, capture_output=True,
                          text=True, timeout=30, cwd="/tmp")
    assert done.returncode == 0 and not done.stderr.strip(), (
        f"sacctmgr {' '.join(args)}: {done.stdout}{done.stderr}")
    return done.stdout


def associations(live: Live) -> list[dict[str, str]]:
    """Every association of the dev cluster: account, user, parent, QOS, default QOS,
    GrpTRES, as `sacctmgr show association` prints them."""
    keys = ("account", "user", "parentname", "qos", "defaultqos", "grptres")
    text = live.run("sacctmgr", "-P", "-n", "show", "association",
                    f"cluster={devcluster.CLUSTER}", f"format={','.join(keys)}")
    return [dict(zip(keys, line.split("|"), strict=False)) for line in text.splitlines()
            if line.strip()]


def accounts(live: Live) -> dict[str, dict[str, str]]:
    """Every account: name -> description and organization."""
    text = live.run("sacctmgr", "-P", "-n", "show", "account",
                    "format=account,description,organization")
    return {a: {"description": d, "organization": o}
            for a, d, o in (line.split("|")[:3] for line in text.splitlines() if line.strip())}


def qos_names(live: Live) -> set[str]:
    return {line.split("|")[0] for line in live.run(
        "sacctmgr", "-P", "-n", "show", "qos", "format=name").splitlines() if line.strip()}


def accounting_snapshot(live: Live) -> dict:
    """What a site would compare before and after: associations, accounts and QOS."""
    qos = live.run("sacctmgr", "-P", "-n", "show", "qos",
                   "format=name,preempt,preemptmode,gracetime,grptres,description")
    return {"associations": sorted(tuple(sorted(a.items())) for a in associations(live)),
            "accounts": accounts(live),
            "qos": sorted(line for line in qos.splitlines() if line.strip())}


def accounting_settled(live: Live, timeout_s: float = 30) -> None:
    """Wait until Slurm's accounting sees no job running or pending (it learns of a
    cancelled job a moment later; until then it refuses to delete what the job ran under)."""
    deadline = time.monotonic() + timeout_s
    while live.run("sacct", "-n", "-X", "-a", "-s", "R,PD", "-o", "jobid").strip():
        assert time.monotonic() < deadline, "jobs still running in Slurm's accounting"
        time.sleep(0.5)


def shape_bare(live: Live) -> None:
    """No job, no reservation; only Slurm's own root account and user and normal QOS."""
    live.cancel_all()
    accounting_settled(live)
    for name in re.findall(r"ReservationName=(\S+)", live.run(
            "scontrol", "-o", "show", "reservation")):
        live.run("scontrol", "delete", f"ReservationName={name}")
    users = {a["user"] for a in associations(live) if a["user"]} - SLURM_OWN["users"]
    if users:
        sacctmgr(live, "delete", "user", "where", f"name={','.join(sorted(users))}")
    # Leaves first: an account is deleted once no other account has it as parent.
    deadline = time.monotonic() + 30
    while (left := [a for a in associations(live) if not a["user"]
                    and a["account"] not in SLURM_OWN["accounts"]]):
        parents = {a["parentname"] for a in left}
        leaves = sorted({a["account"] for a in left} - parents)
        assert leaves and time.monotonic() < deadline, f"accounts left: {left}"
        sacctmgr(live, "delete", "account", "where", f"name={','.join(leaves)}")
    extra = qos_names(live) - SLURM_OWN["qos"]
    if extra:
        # A QOS another preempts is deleted after it (no QOS may name a missing one).
        for name in sorted(extra):
            sacctmgr(live, "modify", "qos", "where", f"name={name}", "set", "preempt=")
        sacctmgr(live, "delete", "qos", "where", f"name={','.join(sorted(extra))}")


def shape_b(live: Live, teams: dict[str, tuple[str, ...]] | None = None) -> dict:
    """Shape (b): the site's QOS `scavenger`, the parent account `site`, the team accounts
    (`vision`, `nlp`) under it, and their users each with their own QOS list
    (`normal,scavenger`) and `DefaultQOS=normal`. Returns the snapshot of the site as it
    is now (what `slurm_reconcile --remove` must give back)."""
    teams = teams or SHAPE_B_TEAMS
    shape_bare(live)
    cluster = f"cluster={devcluster.CLUSTER}"
    sacctmgr(live, "add", "qos", SITE_QOS, "preemptmode=cancel")
    sacctmgr(live, "add", "account", SITE_PARENT, cluster, "description=the site's parent",
             "organization=site")
    sacctmgr(live, "add", "account", ",".join(sorted(teams)), f"parent={SITE_PARENT}", cluster,
             "description=a site team", "organization=site")
    for account, users in sorted(teams.items()):
        for user in users:
            sacctmgr(live, "add", "user", user, f"account={account}", cluster,
                     f"qos=normal,{SITE_QOS}", "defaultqos=normal")
    return accounting_snapshot(live)
