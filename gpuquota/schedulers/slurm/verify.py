"""Every write read back: `sacctmgr` refuses some changes with exit status 0 (its words on
stderr), so a command that exited 0 proves nothing. After an action's commands the object
is read back from Slurm and each command's fields compared; a command whose fields did not
take (or whose output says it was refused) is a refusal naming the command, Slurm's words
and the fix, carrying what did take, so the rest is recorded as applied."""

from __future__ import annotations

import re
import shlex

from gpuquota.schedulers.backend import Action, BackendError, SchedulerObject
from gpuquota.schedulers.slurm.objects import Write

#: What sacctmgr prints (exit 0) when it refuses a change.
REFUSED_WORDS = re.compile(
    r"(don't|do not) have access|error|nothing (new )?(added|modified|deleted)|not (found|"
    r"valid)|doesn't exist|does not exist|unknown|invalid|refus|problem|please give", re.I)

FIXES = (
    (re.compile(r"have access to their default qos", re.I),
     "Some users of the account have their own QOS list without {qos}: gpuquota adds "
     "{qos} to the lists of the members it knows (their cluster identities); map the "
     "others as cluster identities, or run `sacctmgr modify user where account={account} "
     "set qos+={qos}`."),
    (re.compile(r"job\(s\) (active|running)|changes discarded", re.I),
     "Jobs of the object's users still run or wait (as Slurm's accounting sees them): let "
     "them end or cancel them, then run it again."),
    (re.compile(r"bad qos|valid qos", re.I),
     "The QOS does not exist: the first actions of the run create it; look at the problem "
     "about it."),
    (re.compile(r"nothing (new )?(modified|deleted)|not found|does(n't| not) exist", re.I),
     "The object is not there (deleted meanwhile?): the next reconcile creates it again."),
)
GENERIC_FIX = ("Run the command by hand as SlurmUser to see why; the next reconcile tries "
               "again.")
SILENT_FIX = ("Slurm said nothing, yet does not show the change: look at slurmdbd's log and "
              "AccountingStorageEnforce.")


def words_of(stdout: str, stderr: str) -> str:
    """Slurm's refusal in a command's output ('' when it printed none)."""
    lines = [line.strip() for line in (stderr + "\n" + stdout).splitlines()]
    said = [line for line in lines if line and REFUSED_WORDS.search(line)]
    if not said:
        return ""
    at = lines.index(said[0])  # the refusal and the lines that explain it
    return " ".join(line for line in lines[at:at + 3] if line)[:400]


def fix_for(words: str, action: Action) -> str:
    account = action.obj.name.partition("/")[0]
    qos = action.obj.fields.get("defaultqos") or action.obj.fields.get("gq_qos") or "the QOS"
    if not words:
        return SILENT_FIX
    for pattern, fix in FIXES:
        if pattern.search(words):
            return fix.format(account=account, qos=qos)
    return GENERIC_FIX


def refusals(action: Action, said: list[tuple[Write, str]], now: SchedulerObject | None
             ) -> list[tuple[Write, str]]:
    """The commands that did not take, each with Slurm's words ('' when it said nothing)."""
    if action.verb == "delete":
        return [] if now is None else [said[0]]
    if now is None:
        return [said[0]]
    out = []
    for write, words in said:
        missed = [k for k in write.keys if now.fields.get(k) != action.obj.fields.get(k)]
        if missed or (words and write.keys):
            out.append((write, words))
    return out


def refused_error(action: Action, refused: list[tuple[Write, str]], now: SchedulerObject | None
                  ) -> BackendError:
    write, words = refused[0]
    command = shlex.join(write.argv)
    fix = fix_for(words, action)
    shown = {k: (now.fields.get(k, "") if now else "(absent)") for k in action.obj.fields}
    detail = "\n".join(
        [f"$ {shlex.join(w.argv)}\nSlurm: {s or '(nothing)'}" for w, s in refused]
        + [f"Read back: {shown}", f"Wanted: {dict(action.obj.fields)}", f"Fix: {fix}"])
    first = words.split(". ")[0].rstrip(".") if words else "it reads back unchanged"
    message = f"Slurm refused `{command}`: {first}. Fix: {fix}"
    took = None
    if now is not None and action.verb != "delete":
        took = {k: now.fields.get(k, "") for k in action.obj.fields}
    return BackendError(message, detail=detail, took=took)
