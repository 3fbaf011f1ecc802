"""Who owns a GPU process, read from /proc: Slurm job, Kubernetes pod, Docker container or user.

Only the fields the protocol needs are kept: the program name, never the command line, and from
the environment only the Slurm and Kubernetes variables (environments hold secrets).
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent.model import Owner

K8S_POD_RE = re.compile(r"kubepods.*?pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}"
                        r"[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})")
DOCKER_RE = re.compile(r"(?:/docker/|docker-)([0-9a-f]{64})")
SLURM_CGROUP_RE = re.compile(r"(?:/slurm[^/]*/uid_\d+|/slurmstepd\.scope)/job_(\d+)")
ENV_KEYS = (b"SLURM_JOB_ID", b"SLURM_JOBID", b"SLURM_JOB_ACCOUNT", b"HOSTNAME", b"POD_NAMESPACE")
MAX_COMMAND = 256


@dataclass(frozen=True)
class GpuJobRecord:
    """What gpuquota's Slurm prolog wrote for one GPU (`<job id> <user> <account>`), and when."""

    job_id: str
    user: str
    account: str | None
    written: float


def gpu_job_record(directory: str | Path, index: int) -> GpuJobRecord | None:
    """The prolog's record of GPU `index` in `directory` (`gpu<index>`), or None when there
    is none (the epilog removes it at the job's end) or it is not one."""
    path = Path(directory) / f"gpu{index}"
    try:
        fields = path.read_text().split()
        written = path.stat().st_mtime
    except OSError:
        return None
    if len(fields) < 2 or not fields[0].isdigit():
        return None
    return GpuJobRecord(fields[0], fields[1], fields[2] if len(fields) > 2 else None, written)


def user_name(uid: int) -> str | None:
    """The unix user name of `uid`, or None when this host does not know it."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


class OwnerResolver:
    """Looks up process owners under a /proc root; results are cached per (pid, pid_start)."""

    def __init__(self, proc_root: str = "/proc", kubelet_pods: str = "/var/lib/kubelet/pods",
                 user_of: Callable[[int], str | None] = user_name,
                 gpu_jobs_dir: str | None = None) -> None:
        self.proc = Path(proc_root)
        self.kubelet_pods = Path(kubelet_pods)
        self.user_of = user_of
        self.gpu_jobs = Path(gpu_jobs_dir) if gpu_jobs_dir else None
        self._cache: dict[tuple[int, int], tuple[str | None, Owner]] = {}

    def pid_start(self, pid: int) -> int | None:
        """The process start time in clock ticks since boot (field 22 of stat), or None."""
        try:
            stat = (self.proc / str(pid) / "stat").read_bytes()
        except OSError:
            return None
        # The program name (field 2) may contain spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(b")") + 2:].split()
        return int(fields[19]) if len(fields) > 19 else None

    def lookup(self, pid: int, pid_start: int, gpu_index: int | None = None
               ) -> tuple[str | None, Owner]:
        """The program name and owner of a live process; cached for the life of the process.
        A process that shows no job of its own is the Slurm job the prolog recorded on its
        GPU (`gpu_index`), when that record is its user's and older than the process."""
        key = (pid, pid_start)
        if key not in self._cache:
            command, owner = self._read(pid)
            if owner.source == "unix" and gpu_index is not None:
                owner = self._prolog_owner(owner, gpu_index, pid_start) or owner
            self._cache[key] = (command, owner)
        return self._cache[key]

    def _prolog_owner(self, owner: Owner, gpu_index: int, pid_start: int) -> Owner | None:
        """The job in the prolog's record for this GPU (`<job id> <user> <account>`, written
        by deploy/slurm/prolog.sh when the job started), if it can be this process's: the same
        user, and written before the process started (a record left by an ended job is older
        than its user's later processes only if the epilog did not remove it)."""
        record = gpu_job_record(self.gpu_jobs, gpu_index) if self.gpu_jobs else None
        if record is None or record.user != owner.user:
            return None
        started = self._started_at(pid_start)
        if started is None or record.written > started + 1:
            return None
        return Owner(owner.uid, owner.user, "slurm", record.job_id, record.account)

    def _started_at(self, pid_start: int) -> float | None:
        """A process's start as a wall-clock time: boot time + its start in clock ticks."""
        for line in (self._text(self.proc / "stat") or "").splitlines():
            if line.startswith("btime "):
                return int(line.split()[1]) + pid_start / os.sysconf("SC_CLK_TCK")
        return None

    def forget_except(self, live: set[tuple[int, int]]) -> None:
        """Drop cached processes that are gone, so the cache follows the GPU's processes."""
        for key in self._cache.keys() - live:
            del self._cache[key]

    def _read(self, pid: int) -> tuple[str | None, Owner]:
        base = self.proc / str(pid)
        uid = self._uid(base)
        user = self.user_of(uid) if uid is not None else None
        env = self._environ(base)
        cgroup = self._text(base / "cgroup") or ""
        return self._command(base), self._owner(uid, user, env, cgroup)

    def _owner(self, uid: int | None, user: str | None, env: dict[bytes, str],
               cgroup: str) -> Owner:
        job_id = env.get(b"SLURM_JOB_ID") or env.get(b"SLURM_JOBID")
        slurm_cgroup = SLURM_CGROUP_RE.search(cgroup)
        if job_id or slurm_cgroup:
            return Owner(uid, user, "slurm", job_id or slurm_cgroup.group(1),
                         env.get(b"SLURM_JOB_ACCOUNT"))
        pod = K8S_POD_RE.search(cgroup)
        if pod:
            pod_uid = pod.group(1).replace("_", "-")
            namespace = env.get(b"POD_NAMESPACE") or self._pod_namespace(pod_uid)
            return Owner(uid, user, "kubernetes", env.get(b"HOSTNAME") or pod_uid, namespace)
        docker = DOCKER_RE.search(cgroup)
        if docker:
            return Owner(uid, user, "docker", docker.group(1)[:12])
        return Owner(uid, user, "unix")

    def _pod_namespace(self, pod_uid: str) -> str | None:
        # The service-account volume the kubelet projects into every pod carries its namespace.
        pattern = f"{pod_uid}/volumes/kubernetes.io~projected/*/namespace"
        for path in self.kubelet_pods.glob(pattern):
            return self._text(path)
        return None

    def _command(self, base: Path) -> str | None:
        try:
            argv0 = (base / "cmdline").read_bytes().split(b"\0", 1)[0]
        except OSError:
            argv0 = b""
        # Programs that rewrite their title (setproctitle) put arguments into argv[0]: keep the
        # first word only, so no argument, and no secret in one, ever leaves the node.
        name = argv0.split(b" ", 1)[0].rsplit(b"/", 1)[-1].decode(errors="replace")
        name = name or self._text(base / "comm") or ""
        return name[:MAX_COMMAND] or None

    def _uid(self, base: Path) -> int | None:
        for line in (self._text(base / "status") or "").splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
        return None

    def _environ(self, base: Path) -> dict[bytes, str]:
        try:
            raw = (base / "environ").read_bytes()
        except OSError:
            return {}  # another user's process without CAP_SYS_PTRACE: cgroup and uid still tell
        env = {}
        for item in raw.split(b"\0"):
            name, _, value = item.partition(b"=")
            if name in ENV_KEYS:
                env[name] = value.decode(errors="replace")
        return env

    @staticmethod
    def _text(path: Path) -> str | None:
        try:
            return path.read_text(errors="replace").strip() or None
        except OSError:
            return None
