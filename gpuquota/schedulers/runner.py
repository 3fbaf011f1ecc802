"""The one way a backend runs an external command: an argv list (never a shell string), a
timeout, a fixed environment, and a log line with the exit status, the time it took and the
output (credentials never appear in argv: they go in the environment, which is not logged).

Every failure (missing command, timeout, non-zero exit) becomes a `BackendError` carrying
the command's output, which the reconcile loop turns into a cluster problem.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass

from gpuquota.schedulers.backend import BackendError

log = logging.getLogger(__name__)
OUTPUT_LOGGED_CHARS = 2000
#: What Slurm's commands print when slurmctld or slurmdbd does not answer: every command
#: then fails alike, and the outage is one problem (`OUTAGE`), whichever command found it.
_OUTAGE_WORDS = re.compile(
    r"Unable to contact slurm controller|Connection refused|Socket timed out|"
    r"Problem talking to the database|slurmdbd.*(not responding|down)|"
    r"Zero Bytes were transmitted|Transport endpoint is not connected", re.I)
OUTAGE = "Slurm's daemons cannot be reached: slurmctld or slurmdbd does not answer"


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float


@dataclass(frozen=True)
class Runner:
    """Runs the commands of one cluster: found in `commands_dir` (empty: on PATH), with
    `env` added to a minimal environment (PATH, LANG=C, TZ=UTC so times read as UTC)."""

    commands_dir: str = ""
    timeout_s: float = 30
    env: tuple[tuple[str, str], ...] = ()

    def _resolve(self, command: str) -> str:
        if self.commands_dir:
            path = os.path.join(self.commands_dir, command)
            if os.access(path, os.X_OK):
                return path
            raise BackendError(f"{command} not found in {self.commands_dir}")
        found = shutil.which(command, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if found is None:
            raise BackendError(f"{command} not found on PATH")
        return found

    def run(self, argv: list[str], *, check: bool = True, timeout_s: float | None = None
            ) -> CommandResult:
        """Run `argv`; BackendError when it cannot start, times out, or (with `check`)
        exits non-zero."""
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError("argv must be a non-empty list of strings")
        full = [self._resolve(argv[0]), *argv[1:]]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C", "LC_ALL": "C",
               "TZ": "UTC", **dict(self.env)}
        limit = timeout_s or self.timeout_s
        started = time.monotonic()
        try:
            done = subprocess.run(full, capture_output=True, text=True, timeout=limit, env=env,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as exc:
            log.warning("command timed out after %ss: %s", limit, argv)
            raise BackendError(f"{argv[0]} did not answer within {limit} s",
                               detail=_text(exc.stderr)) from exc
        except OSError as exc:
            raise BackendError(f"{argv[0]} could not be run: {exc}") from exc
        result = CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr,
                               time.monotonic() - started)
        # What a command printed (job lists, users' names) is logged at DEBUG only.
        log.info("ran %s: exit %s in %.2fs", argv, done.returncode, result.elapsed_s)
        log.debug("ran %s: stdout %r; stderr %r", argv, done.stdout[:OUTPUT_LOGGED_CHARS],
                  done.stderr[:OUTPUT_LOGGED_CHARS])
        if check and done.returncode != 0:
            message = (done.stderr.strip() or done.stdout.strip()).splitlines()
            if _OUTAGE_WORDS.search(done.stderr + done.stdout):
                raise BackendError(OUTAGE, outage=True,
                                   detail=f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}")
            raise BackendError(
                f"{argv[0]} exited with {done.returncode}: "
                f"{message[-1] if message else 'no output'}"[:250],
                detail=f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}",
            )
        return result


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
