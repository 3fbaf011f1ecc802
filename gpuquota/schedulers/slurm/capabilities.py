"""What a Slurm cluster can enforce, read from `scontrol show config` and its nodes' GRES,
and the best binding level that allows."""

from __future__ import annotations

import re

from gpuquota.schedulers.backend import BackendError, CapabilityReport
from gpuquota.schedulers.models import BindingLevel

#: GRES reservations (`TRES=gres/gpu...` on a reservation) exist from this version;
#: 25.05.3 fixed GPUs leaking out of such reservations.
GRES_RESERVATIONS_FROM = (23, 11)
GRES_RESERVATION_LEAK_FIXED = (25, 5, 3)
CONFIG_KEYS = {
    "SLURM_VERSION": "version",
    "SelectType": "select_type",
    "SelectTypeParameters": "select_parameters",
    "AccountingStorageType": "accounting_storage",
    "AccountingStorageTRES": "tres",
    "AccountingStorageEnforce": "enforce",
    "PreemptType": "preempt_type",
    "PreemptMode": "preempt_mode",
    "JobRequeue": "job_requeue",
    "JobSubmitPlugins": "job_submit_plugins",
    "GresTypes": "gres_types",
    "ClusterName": "cluster_name",
    "Prolog": "prolog",
}


def config_parse(text: str) -> dict[str, str]:
    """`scontrol show config`'s `Key = value` lines -> the facts gpuquota uses."""
    facts = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        name = CONFIG_KEYS.get(key.strip())
        if sep and name:
            value = value.strip()
            facts[name] = "" if value in ("(null)", "none") else value
    if "version" not in facts:
        raise BackendError("scontrol show config gave no SLURM_VERSION: not a Slurm answer",
                           detail=text[:2000])
    return facts


def node_gres_types(text: str) -> dict[str, list[str]]:
    """`scontrol -o show node` -> node name -> its GPU GRES types (`gpu:h100:4(S:0)`)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        name = re.search(r"\bNodeName=(\S+)", line)
        gres = re.search(r"\bGres=(\S+)", line)
        if not name:
            continue
        types = []
        for item in (gres.group(1).split(",") if gres else []):
            parts = item.split("(")[0].split(":")
            if parts[0] == "gpu" and len(parts) == 3:
                types.append(parts[1])
        found[name.group(1)] = sorted(set(types))
    return found


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def capabilities_report(config: dict[str, str], nodes: dict[str, list[str]], *,
                        rest_url: str = "", rest_error: str = "") -> CapabilityReport:
    """The facts, the best binding level they allow, and notes for admins; `rest_url`: jobs
    are read through that slurmrestd (`rest_error`: why it cannot be asked now)."""
    version = config["version"]
    enforce = [e.strip() for e in config.get("enforce", "").split(",") if e.strip()]
    tres = [t.strip() for t in config.get("tres", "").split(",") if t.strip()]
    gpu_types = sorted({t for types in nodes.values() for t in types})
    limits = "limits" in enforce or "safe" in enforce
    gres_reservations = version_tuple(version) >= GRES_RESERVATIONS_FROM
    facts = {
        **config, "enforce": enforce, "tres": tres, "gpu_types": gpu_types,
        "nodes": nodes, "limits_enforced": limits, "gres_reservations": gres_reservations,
        "preemption": config.get("preempt_type") == "preempt/qos",
        # JobRequeue=0: a job is requeueable only when submitted with --requeue.
        "requeue": config.get("job_requeue", "1").strip() != "0",
        "jobs_read_through": f"slurmrestd {rest_url}" if rest_url else "sacct --json",
    }
    notes = []
    if rest_error:
        notes.append(f"Jobs cannot be imported until slurmrestd answers: {rest_error}.")
    if not limits:
        notes.append("AccountingStorageEnforce has no 'limits': GrpTRES quotas are not enforced.")
    untracked = [t for t in gpu_types if f"gres/gpu:{t}" not in tres]
    if untracked:
        notes.append("AccountingStorageTRES does not track " + ", ".join(
            f"gres/gpu:{t}" for t in untracked) + ": typed GPU limits cannot hold.")
    if gres_reservations:
        best = BindingLevel.EXACT_GPUS
        if version_tuple(version) < GRES_RESERVATION_LEAK_FIXED:
            notes.append("GRES reservations before 25.05.3 can leak GPUs to other jobs "
                         "(fixed in 25.05.3).")
    else:
        best = BindingLevel.WHOLE_NODES
        notes.append(f"Slurm {version} cannot reserve GPUs (GRES reservations need 23.11): "
                     "GPUs are held by whole-node reservations or account limits.")
    if not facts["preemption"]:
        notes.append(f"gpuquota does not lend this cluster's GPUs: PreemptType is "
                     f"{config.get('preempt_type') or 'preempt/none'}, not preempt/qos, so an "
                     "owner's job could not take a lent GPU back from a borrower (gq-owner "
                     "preempts gq-scavenger only under preempt/qos).")
    elif not facts["requeue"] or config.get("preempt_mode", "").upper().startswith("CANCEL"):
        notes.append("Borrowers are cancelled, not requeued, when a lent GPU returns unless "
                     "they submit with --requeue: " + " and ".join(filter(None, [
                         "JobRequeue=0" if not facts["requeue"] else "",
                         f"PreemptMode={config.get('preempt_mode')}"
                         if config.get("preempt_mode", "").upper().startswith("CANCEL")
                         else ""])) + " (gq-scavenger's own PreemptMode=REQUEUE applies to "
                     "requeueable jobs); work since their last checkpoint is lost.")
    if "lua" not in config.get("job_submit_plugins", ""):
        notes.append("No job_submit/lua: untyped GPU requests escape typed limits "
                     "(ship deploy/slurm/job_submit.lua).")
    return CapabilityReport(version=version, best_binding=best, facts=facts, notes=tuple(notes))
