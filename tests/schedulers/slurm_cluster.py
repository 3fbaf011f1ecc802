"""The dev Slurm cluster (deploy/slurm/dev-cluster) for the tests marked `slurm`: started
once per session, in the foreground, by the process running them (each xdist worker that
runs a live test file starts its own, on its own ports: tests/parallel.py). A module that
puts it in a site's shape (slurm_shapes.py) gives it back bare."""

import subprocess
import time

# The dev cluster's script, loaded once (the demo starts the same cluster: `slurm_demo`),
# and why it cannot start here (None: it can).
from gpuquota.demo.slurm import devcluster
from gpuquota.demo.slurm import slurm_demo_unavailable as unavailable_reason  # noqa: F401


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
               extra: tuple[str, ...] = (), srun: bool = False, typed: bool = True) -> str:
        wrap = f"srun sleep {seconds}" if srun else f"sleep {seconds}"
        gres = f"gpu:{devcluster.GPU_TYPE}:{gpus}" if typed else f"gpu:{gpus}"
        out = self.run("sbatch", "--parsable", f"--uid={user}", f"--account={account}",
                       f"--gres={gres}", "--output=/dev/null",
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
