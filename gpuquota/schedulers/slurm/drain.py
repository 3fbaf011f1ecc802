"""Draining a Slurm node for a GPU failure, and resuming it (docs/reliability.md#drains):
`scontrol update NodeName=<node> State=DRAIN Reason="[gpuquota] xid 79"` through the one
runner, read back with `scontrol -o show node`. The reason starts with `[gpuquota]`, the
mark of a drain gpuquota owns: a node drained by the site (another reason) is never
resumed by gpuquota. A write is done when reading it back shows it."""

import re

from gpuquota.core.names import slurm_name_error
from gpuquota.schedulers.backend import BackendError
from gpuquota.schedulers.runner import Runner

OWNED_REASON_PREFIX = "[gpuquota]"
_STATE = re.compile(r"(?:^|\s)State=(\S+)")
_REASON = re.compile(r"(?:^|\s)Reason=(.*?)(?:\s\[[^\]@\s]+@[^\]]+\])?(?:\s+\w+=|$)")


def _hostname(hostname: str) -> str:
    """The node name, validated where it enters a command (never a shell, but still)."""
    error = slurm_name_error(hostname, what="A node name", own=True)
    if error:
        raise BackendError(error)
    return hostname


def node_state(runner: Runner, hostname: str) -> tuple[set[str], str]:
    """(the node's state flags, e.g. {"IDLE", "DRAIN"}, and its reason)."""
    text = runner.run(["scontrol", "-o", "show", "node", _hostname(hostname)]).stdout
    state = _STATE.search(text)
    reason = _REASON.search(text)
    return (set(state.group(1).split("+")) if state else set(),
            reason.group(1).strip() if reason else "")


#: Base states of a node still running jobs; Slurm shows them with `+DRAIN` while draining.
_BUSY = {"ALLOCATED", "ALLOC", "MIXED", "MIX", "COMPLETING", "COMPLETING*"}


def drain_progress(flags: set[str]) -> str:
    """"draining" (drained but jobs still run: `MIXED+DRAIN`, `ALLOCATED+DRAIN`, or
    `DRAINING` as sinfo says it), "drained" (empty: `IDLE+DRAIN`, `DOWN+DRAIN`, or
    `DRAINED`), "" when the node is not drained."""
    if "DRAINING" in flags:
        return "draining"
    if "DRAINED" in flags:
        return "drained"
    if "DRAIN" not in flags:
        return ""
    return "draining" if flags & _BUSY else "drained"


def node_drain_progress(runner: Runner, hostname: str) -> str:
    """The node's drain progress as Slurm shows it now (see `drain_progress`)."""
    return drain_progress(node_state(runner, hostname)[0])


def node_drain(runner: Runner, hostname: str, reason: str) -> None:
    """Drain the node (running jobs finish, no new job starts) with a reason gpuquota
    owns; verified by reading the node back."""
    text = f"{OWNED_REASON_PREFIX} {reason}"[:120]
    runner.run(["scontrol", "update", f"NodeName={_hostname(hostname)}", "State=DRAIN",
                f"Reason={text}"])
    flags, _ = node_state(runner, hostname)
    if not flags & {"DRAIN", "DRAINED", "DRAINING"}:
        raise BackendError(f"scontrol accepted the drain of {hostname} but the node shows "
                           f"{'+'.join(sorted(flags)) or 'no state'}")


def node_resume(runner: Runner, hostname: str) -> bool:
    """Resume the node if gpuquota's drain holds it; False (nothing done) when the site
    drained it for a reason of its own, or it is not drained."""
    flags, reason = node_state(runner, hostname)
    if not flags & {"DRAIN", "DRAINED", "DRAINING"}:
        return False
    if not reason.startswith(OWNED_REASON_PREFIX):
        return False
    runner.run(["scontrol", "update", f"NodeName={_hostname(hostname)}", "State=RESUME"])
    flags, _ = node_state(runner, hostname)
    if flags & {"DRAIN", "DRAINED", "DRAINING"}:
        raise BackendError(f"scontrol accepted the resume of {hostname} but it is still drained")
    return True
