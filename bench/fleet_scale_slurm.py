"""Slurm as `bench.fleet_scale` sees it: each cluster's backend (export mode: it plans,
observes and diffs, and writes nothing) runs its commands from a folder of stand-ins that
answer as slurmctld and slurmdbd would for that cluster at its size:

- `scontrol show config` / `-o show node`: Slurm 24.05, one line per node with 8 GPUs;
- `scontrol -d -o show job`: a running 8-GPU job on every reserved node (the one whose GPUs
  the running-GPUs loop records), `-o show reservation`: none;
- `sacct --json`: of the jobs submitted in the last 24 h and 5 min, `--jobs-per-gpu-day`
  per GPU (3: a 4-GPU job of 2 h on average on a busy fleet), those still running (the last
  2 h's) or ended since `-S` (as sacct selects them), or those `-j` names;
- `sacctmgr show ...`: nothing (nothing applied yet: every run plans everything).

Every team has a Slurm account on every cluster (its slug), as plan_inputs reads them.
"""

import json
import stat
from datetime import timedelta
from pathlib import Path

SCRIPTS = {
    "scontrol": """#!/bin/sh
D=$(dirname "$0")
case "$*" in
  "show config") cat "$D/config.txt";;
  "-o show node") cat "$D/nodes.txt";;
  "-d -o show job") cat "$D/jobs.txt";;
esac
""",
    "sacct": """#!/usr/bin/env python3
import json, sys, os
from datetime import datetime, timezone
args, since, ids = sys.argv[1:], 0, None
if "-S" in args:
    since = datetime.strptime(args[args.index("-S") + 1], "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=timezone.utc).timestamp()
if "-j" in args:
    ids = set(args[args.index("-j") + 1].split(","))
with open(os.path.join(os.path.dirname(sys.argv[0]), "sacct.json")) as f:
    jobs = json.load(f)["jobs"]
jobs = [j for j in jobs if (str(j["job_id"]) in ids if ids is not None
                            else not j["time"]["end"] or j["time"]["end"] >= since)]
json.dump({"jobs": jobs}, sys.stdout)
""",
    "sacctmgr": "#!/bin/sh\nexit 0\n",
}
CONFIG = """SLURM_VERSION = 24.05.4
ClusterName = {name}
SelectType = select/cons_tres
AccountingStorageType = accounting_storage/slurmdbd
AccountingStorageTRES = gres/gpu,gres/gpu:h100,gres/gpu:a100,gres/gpu:l4
AccountingStorageEnforce = associations,limits,qos,safe
PreemptType = preempt/qos
PreemptMode = REQUEUE
GresTypes = gpu
"""
GRES = {"H100-80GB": "h100", "A100-40GB": "a100", "L4": "l4"}


def slurm_fake_install(root: Path, now, jobs_per_gpu_day: float) -> dict:
    """Make every cluster a Slurm cluster answered from `root/<slug>/`; counts written."""
    from accounts.models import ClusterIdentity, Team
    from gpuquota.inventory.models import Cluster, Gpu
    from gpuquota.reservations.models import Assignment
    from gpuquota.schedulers.models import BackendConfig

    counts = {"clusters": 0, "running_jobs": 0, "sacct_jobs": 0}
    teams = list(Team.objects.order_by("id").values_list("id", "slug"))
    for cluster in Cluster.objects.order_by("id"):
        folder = root / cluster.slug
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in SCRIPTS.items():
            path = folder / name
            path.write_text(text)
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        gpus = list(Gpu.objects.filter(node__cluster=cluster).order_by("id")
                    .values_list("node__hostname", "gpu_class__name"))
        nodes = dict(gpus)
        (folder / "config.txt").write_text(CONFIG.format(name=cluster.slug))
        (folder / "nodes.txt").write_text("".join(
            f"NodeName={host} Arch=x86_64 CPUTot=128 Gres=gpu:{GRES[cls]}:8(S:0-1) "
            f"State=ALLOCATED Partitions=gpu\n" for host, cls in nodes.items()))
        reserved = dict(Assignment.objects.filter(
            gpu__node__cluster=cluster, assigned_from__lte=now, assigned_until__gt=now,
            gpu__index=0).values_list("gpu__node__hostname", "reservation__team__slug"))
        start = int((now - timedelta(hours=1)).timestamp())
        lines = [f"JobId={1_000_000 + k} JobName=train UserId=u{k % 97}(1{k % 97:03d}) "
                 f"Account={team} JobState=RUNNING Partition=gpu StartTime={start} "
                 f"NodeList={host} Nodes={host} CPU_IDs=0-127 Mem=0 "
                 f"GRES=gpu:{GRES[nodes[host]]}:8(IDX:0-7)\n"
                 for k, (host, team) in enumerate(sorted(reserved.items()))]
        (folder / "jobs.txt").write_text("".join(lines))
        window_s = 24 * 3600 + 300
        n_jobs = int(len(gpus) * jobs_per_gpu_day * window_s / 86400)
        hosts = list(nodes)
        jobs = []
        for k in range(n_jobs):
            submitted = int(now.timestamp()) - window_s + k * window_s // max(n_jobs, 1)
            ended = submitted + 30 + 7200 <= int(now.timestamp())
            jobs.append({
                "job_id": 2_000_000 + k, "state": {"current": ["COMPLETED" if ended
                                                                else "RUNNING"]},
                "time": {"submission": submitted, "start": submitted + 30,
                         "end": submitted + 30 + 7200 if ended else 0,
                         "limit": {"set": True, "infinite": False, "number": 1440}},
                "account": teams[k % len(teams)][1], "user": f"u{k % 97}",
                "partition": "gpu", "qos": "normal", "nodes": hosts[k % len(hosts)],
                "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 4},
                                       {"type": "gres", "name": "gpu:h100", "count": 4}]},
                "reservation": {"id": 0, "name": ""}})
        (folder / "sacct.json").write_text(json.dumps({"jobs": jobs}))
        have = set(ClusterIdentity.objects.filter(cluster=cluster).values_list("key", flat=True))
        ClusterIdentity.objects.bulk_create([
            ClusterIdentity(cluster=cluster, kind=ClusterIdentity.Kind.SLURM_ACCOUNT,
                            key=slug, team_id=team_id, valid_from=now - timedelta(days=90))
            for team_id, slug in teams
            if slug not in have],
            batch_size=5000)
        Cluster.objects.filter(pk=cluster.pk).update(scheduler=Cluster.Scheduler.SLURM)
        BackendConfig.objects.update_or_create(cluster=cluster, defaults={
            "mode": BackendConfig.Mode.EXPORT, "commands_dir": str(folder),
            "command_timeout_s": 600})
        counts["clusters"] += 1
        counts["running_jobs"] += len(lines)
        counts["sacct_jobs"] += n_jobs
    return counts
