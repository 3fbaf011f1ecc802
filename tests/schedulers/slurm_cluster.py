"""The dev Slurm cluster (deploy/slurm/dev-cluster) for the tests marked `slurm`: started
once per session, in the foreground, by the process running them (all live tests are in
one file, so one xdist worker starts it)."""

import importlib.util
import os
import subprocess
import time
from pathlib import Path

import gpuquota

ROOT = Path(gpuquota.__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "devcluster", ROOT / "deploy/slurm/dev-cluster/devcluster.py")
devcluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(devcluster)


def unavailable_reason() -> str | None:
    """Why the dev cluster cannot start here, or None."""
    missing = devcluster.missing_binaries()
    if missing:
        return f"needs Debian's Slurm, munge and MariaDB: missing {', '.join(missing)}"
    if os.geteuid() != 0:
        return "needs root (slurmd runs jobs as their users)"
    return None


class Live:
    """The running cluster and helpers to drive real jobs on it."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.env = cluster.env
        self.slurm_conf = cluster.env["SLURM_CONF"]

    def run(self, *argv: str) -> str:
        done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              timeout=30, cwd="/tmp")
        assert done.returncode == 0, f"{argv}: {done.stderr}"
        return done.stdout

    def sbatch(self, *, user: str, account: str, gpus: int = 1, seconds: int = 300,
               extra: tuple[str, ...] = (), srun: bool = False) -> str:
        wrap = f"srun sleep {seconds}" if srun else f"sleep {seconds}"
        out = self.run("sbatch", "--parsable", f"--uid={user}", f"--account={account}",
                       f"--gres=gpu:{devcluster.GPU_TYPE}:{gpus}", "--output=/dev/null",
                       "--chdir=/tmp", *extra, "--wrap", wrap)
        return out.strip().split(";")[0]

    def job(self, job_id: str) -> dict:
        import re

        text = self.run("scontrol", "-o", "show", "job", job_id)
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait_state(self, job_id: str, states: set[str], timeout_s: float = 20) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job.get("JobState") in states or time.monotonic() > deadline:
                return job
            time.sleep(0.2)

    def cancel_all(self) -> None:
        self.run("scancel", "--partition=gpu")
        deadline = time.monotonic() + 20
        while self.run("squeue", "-h", "-t", "RUNNING,COMPLETING,PENDING").strip():
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
