#!/usr/bin/env python3
"""The project's dev/test Slurm cluster on localhost: munge, a MariaDB of its own, slurmdbd,
slurmctld and two slurmd nodes with four fake GPUs each, every daemon in the foreground as
a child of this process, all state under one directory.

    python3 deploy/slurm/dev-cluster/devcluster.py [--dir /tmp/gq-slurm] [--rest] [--shape a|b|c]

prints the environment to use it (`SLURM_CONF=...`; with `--rest`, slurmrestd's URL and a
token) and runs until Ctrl-C, which stops every daemon. `--shape` sets the cluster up as a
site has it before gpuquota writes anything (SHAPES; `reshape` changes it while it runs).
The tests start the same cluster once per session (`tests/schedulers/conftest.py`).
It needs root (slurmd runs jobs as their users) and Debian's slurm-wlm, slurmdbd, slurmrestd,
slurm-wlm-jwt-plugin, munge and mariadb-server; it never touches /etc/slurm, /etc/munge nor
the system's MariaDB.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLUSTER = "gqdev"
NODES = ("gqnode1", "gqnode2")
GPUS_PER_NODE = 4
GPU_TYPE = "h100"
#: The daemons' ports: GQ_SLURM_PORT_BASE (default 17817) and the next few, so two clusters
#: (two checkouts' test runs) can run side by side on one host.
PORT_BASE = int(os.environ.get("GQ_SLURM_PORT_BASE", "17817"))
PORTS = {"slurmctld": PORT_BASE, "slurmdbd": PORT_BASE + 2, "mariadb": PORT_BASE + 3,
         "gqnode1": PORT_BASE + 4, "gqnode2": PORT_BASE + 5, "slurmrestd": PORT_BASE + 6}
#: slurmrestd refuses to run as root or SlurmUser: it drops to this user and group.
REST_USER, REST_GROUP = "nobody", "nogroup"
#: Site shapes (issue 27, docs/slurm.md "Site shapes"): (a) the project's own (today's);
#: (b) a site's accounting: users with their own QOS list and DefaultQOS=normal, the team
#: accounts vision and nlp under a site parent, a site QOS `scavenger`; (c) a site whose
#: PreemptMode is CANCEL and whose jobs are not requeueable (JobRequeue=0). Each is the
#: slurm.conf lines it changes (applied by `scontrol reconfigure`, no restart) and whether
#: it sets the site's accounting up.
SHAPES = {
    "a": {"conf": {}, "site_accounting": False},
    "b": {"conf": {}, "site_accounting": True},
    "c": {"conf": {"PreemptMode": "CANCEL", "JobRequeue": "0"}, "site_accounting": False},
}
#: Shape (b)'s site: parent account, QOS, team accounts and their (existing system) users.
SITE_PARENT, SITE_QOS = "site", "scavenger"
SITE_TEAMS = {"vision": ("daemon",), "nlp": ("nobody",)}
BINARIES = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd",
            "sacctmgr", "scontrol", "sbatch", "slurmrestd")


def missing_binaries() -> list[str]:
    """The daemons and commands this cluster needs that are not installed."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    missing = [b for b in BINARIES if shutil.which(b, path=path) is None]
    if not glob.glob("/usr/lib/*/slurm-wlm/auth_jwt.so"):  # slurm-wlm-jwt-plugin
        missing.append("auth_jwt.so")
    return missing


def conf_override(text: str, values: dict[str, str]) -> str:
    """slurm.conf `text` with each `Key=value` of `values` replacing the line that sets Key
    (added at the end when none does)."""
    lines = text.splitlines()
    for key, value in values.items():
        at = [i for i, line in enumerate(lines) if line.split("=", 1)[0].strip() == key]
        if at:
            lines[at[0]] = f"{key}={value}"
        else:
            lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def _wait_port(port: int, timeout_s: float, proc: subprocess.Popen, name: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode} while starting")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{name} did not listen on port {port} within {timeout_s} s")


class DevCluster:
    """Start with `start()`, stop with `stop()`; `env` is what the Slurm commands need."""

    def __init__(self, root: Path, shape: str = "a"):
        if shape not in SHAPES:
            raise ValueError(f"shape: one of {', '.join(SHAPES)}")
        self.root = Path(root)
        self.shape = shape
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.env = dict(os.environ, SLURM_CONF=str(self.root / "etc/slurm.conf"),
                        PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")

    # -- files -----------------------------------------------------------------------------
    def _render(self, template: str, target: Path, mode: int = 0o644) -> None:
        text = (HERE / template).read_text()
        values = {"DIR": str(self.root), "CLUSTER": CLUSTER, "GPU_TYPE": GPU_TYPE,
                  "PROLOG": str(self.root / "etc/prolog.sh"),
                  "EPILOG": str(self.root / "etc/epilog.sh"),
                  **{f"PORT_{k.upper()}": str(v) for k, v in PORTS.items()}}
        for key, value in values.items():
            text = text.replace("@" + key + "@", value)
        if template == "slurm.conf.in":
            text = conf_override(text, SHAPES[self.shape]["conf"])
        target.write_text(text)
        target.chmod(mode)

    def prepare(self) -> None:
        """Fresh directories, configuration files, the munge key and fake GPU devices."""
        for name, port in PORTS.items():
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    raise RuntimeError(f"port {port} ({name}) is taken: is a dev cluster "
                                       "already running?")
        if self.root.exists():
            shutil.rmtree(self.root)
        for sub in ("etc", "log", "run", "state", "munge", "mysql", "mysql-tmp", "gpu-jobs",
                    *(f"spool/{n}" for n in NODES), *(f"dev/{n}" for n in NODES)):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        (self.root / "gpu-jobs").chmod(0o1777)
        key = self.root / "etc/munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        # auth/jwt's signing key (slurmctld and slurmdbd): tokens from `scontrol token`.
        jwt_key = self.root / "etc/jwt_hs256.key"
        jwt_key.write_bytes(os.urandom(32))
        jwt_key.chmod(0o600)
        self._render("slurm.conf.in", self.root / "etc/slurm.conf")
        self._render("gres.conf.in", self.root / "etc/gres.conf")
        self._render("slurmdbd.conf.in", self.root / "etc/slurmdbd.conf", 0o600)
        # gpuquota's job_submit.lua: GPU requests without a type get one (typed limits hold).
        shutil.copy(HERE.parent / "job_submit.lua", self.root / "etc/job_submit.lua")
        for script in ("prolog.sh", "epilog.sh"):
            # One records directory per node: both slurmd share this host.
            target = self.root / "etc" / script
            target.write_text((HERE.parent / script).read_text().replace(
                "/run/gpuquota/gpu-jobs", f"{self.root}/gpu-jobs/$SLURMD_NODENAME"))
            target.chmod(0o755)
        for n, node in enumerate(NODES):
            for i in range(GPUS_PER_NODE):
                # Character devices, or Slurm sets no CUDA_VISIBLE_DEVICES / SLURM_JOB_GPUS.
                os.mknod(self.root / f"dev/{node}/fakegpu{i}", 0o666 | stat.S_IFCHR,
                         os.makedev(195, n * GPUS_PER_NODE + i))

    # -- daemons -----------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(self.root / f"log/{name}.out", "ab")  # noqa: SIM115 (closed by the child)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                env={**self.env, **(env or {})}, start_new_session=True)
        log.close()
        self.procs.append((name, proc))
        return proc

    def _run(self, argv: list[str], timeout_s: float = 30) -> str:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True,
                              timeout=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def start(self, timeout_s: float = 60) -> None:
        """Everything up and both nodes idle; raises with the reason (and stops what it
        started) when a daemon does not come up."""
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout_s: float) -> None:
        self.prepare()
        r = self.root
        munged = self._spawn("munged", [
            "munged", "-F", "--force", f"--socket={r}/munge/munge.socket",
            f"--key-file={r}/etc/munge.key", f"--pid-file={r}/run/munged.pid",
            f"--log-file={r}/log/munged.log", f"--seed-file={r}/run/munged.seed",
        ])
        deadline = time.monotonic() + 10
        while not (r / "munge/munge.socket").exists():
            if munged.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("munged did not start: see " + str(r / "log/munged.out"))
            time.sleep(0.05)
        # MariaDB's temporary tables in the cluster's own directory, not the shared /tmp: a
        # bootstrap whose `#sql-temptable-*` file vanished under it aborts ("Unknown table
        # 'mysql.tmp_user_sys'"), which failed a CI run.
        self._run(["mariadb-install-db", "--no-defaults", f"--datadir={r}/mysql",
                   f"--tmpdir={r}/mysql-tmp", "--user=root",
                   "--auth-root-authentication-method=normal", "--skip-test-db"], timeout_s=120)
        mariadb = self._spawn("mariadb", [
            "mariadbd", "--no-defaults", f"--datadir={r}/mysql", f"--tmpdir={r}/mysql-tmp",
            "--user=root",
            f"--port={PORTS['mariadb']}", "--bind-address=127.0.0.1",
            f"--socket={r}/run/mysql.sock", f"--pid-file={r}/run/mysql.pid",
            "--skip-grant-tables", "--innodb-buffer-pool-size=32M", "--skip-log-bin",
        ])
        _wait_port(PORTS["mariadb"], timeout_s, mariadb, "mariadbd")
        dbd = self._spawn("slurmdbd", ["slurmdbd", "-D"])  # reads slurmdbd.conf beside SLURM_CONF
        _wait_port(PORTS["slurmdbd"], timeout_s, dbd, "slurmdbd")
        self._run(["sacctmgr", "-i", "add", "cluster", CLUSTER])
        ctld = self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
        _wait_port(PORTS["slurmctld"], timeout_s, ctld, "slurmctld")
        for node in NODES:
            slurmd = self._spawn(node, ["slurmd", "-D", "-N", node])
            _wait_port(PORTS[node], timeout_s, slurmd, f"slurmd {node}")
        self._wait_idle(timeout_s)
        if SHAPES[self.shape]["site_accounting"]:
            self.site_accounting()

    def reshape(self, shape: str, timeout_s: float = 20) -> None:
        """Put the running cluster's slurm.conf in `shape` (`scontrol reconfigure`, no
        restart); shape (b)'s site accounting is the caller's (`site_accounting`, or the
        tests' slurm_shapes.shape_b)."""
        if shape not in SHAPES:
            raise ValueError(f"shape: one of {', '.join(SHAPES)}")
        conf = self.root / "etc/slurm.conf"
        before, self.shape = conf.read_text(), shape
        self._render("slurm.conf.in", conf)
        if conf.read_text() == before:
            return
        self._run(["scontrol", "reconfigure"])
        want = {"PreemptMode": "REQUEUE", "JobRequeue": "1", **SHAPES[shape]["conf"]}
        deadline = time.monotonic() + timeout_s
        while True:
            config = dict(line.split("=", 1) for line in self._run(
                ["scontrol", "show", "config"]).splitlines() if "=" in line)
            config = {k.strip(): v.strip() for k, v in config.items()}
            if all(config.get(k, "").upper() == v.upper() for k, v in want.items()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"slurmctld did not take shape {shape}: {want}")
            time.sleep(0.2)

    def site_accounting(self) -> None:
        """Shape (b)'s accounting, as a site admin sets it up with sacctmgr."""
        where = f"cluster={CLUSTER}"
        qos = self._run(["sacctmgr", "-P", "-n", "show", "qos", "format=name"]).split()
        if SITE_QOS not in qos:
            self._run(["sacctmgr", "-i", "add", "qos", SITE_QOS, "preemptmode=cancel"])
        self._run(["sacctmgr", "-i", "add", "account", SITE_PARENT, where,
                   "description=the site's parent", "organization=site"])
        self._run(["sacctmgr", "-i", "add", "account", ",".join(sorted(SITE_TEAMS)),
                   f"parent={SITE_PARENT}", where, "description=a site team",
                   "organization=site"])
        for account, users in sorted(SITE_TEAMS.items()):
            for user in users:
                self._run(["sacctmgr", "-i", "add", "user", user, f"account={account}", where,
                           f"qos=normal,{SITE_QOS}", "defaultqos=normal"])

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{PORTS['slurmrestd']}"

    def rest_start(self, timeout_s: float = 30) -> str:
        """Start slurmrestd (JWT only, as REST_USER: it refuses root) unless it runs; its
        URL. It passes each request's token on to slurmctld and slurmdbd."""
        if not any(name == "slurmrestd" and proc.poll() is None for name, proc in self.procs):
            self.procs = [(n, p) for n, p in self.procs if n != "slurmrestd"]
            rest = self._spawn("slurmrestd", [
                "slurmrestd", "-a", "rest_auth/jwt", "-u", REST_USER, "-g", REST_GROUP,
                f"127.0.0.1:{PORTS['slurmrestd']}"], env={"SLURM_JWT": "daemon"})
            _wait_port(PORTS["slurmrestd"], timeout_s, rest, "slurmrestd")
        return self.rest_url

    def rest_stop(self) -> None:
        for name, proc in self.procs:
            if name == "slurmrestd" and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)

    def token(self, username: str = "root", lifespan_s: int = 3600) -> str:
        """A JWT for `username` (`scontrol token`), for slurmrestd or SLURM_JWT."""
        out = self._run(["scontrol", "token", f"username={username}",
                         f"lifespan={lifespan_s}"])
        return out.strip().partition("SLURM_JWT=")[2]

    def _wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        states = ""
        while time.monotonic() < deadline:
            states = self._run(["sinfo", "-h", "-N", "-o", "%N %t"])
            if all(f"{n} idle" in states for n in NODES):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the nodes did not become idle: {states.strip()}")

    def stop(self) -> None:
        """Cancel every job, SIGTERM every daemon (newest first), SIGKILL what is still there
        after 10 s, with the processes they started."""
        try:
            self._run(["scancel", "--partition=gpu", "--full"], timeout_s=10)
            deadline = time.monotonic() + 15
            while self._run(["squeue", "-h"], timeout_s=10).strip():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            pass  # slurmctld is not there: nothing to cancel
        for _name, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _name, proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # what it left in its session
            except ProcessLookupError:
                pass
        self.procs.clear()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/tmp/gq-slurm", help="where all state lives")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="a",
                        help="the site shape: a (the project's own), b (a site's accounting), "
                        "c (PreemptMode=CANCEL, JobRequeue=0)")
    parser.add_argument("--rest", action="store_true",
                        help="also start slurmrestd (JWT) and print a token for root")
    args = parser.parse_args()
    if missing := missing_binaries():
        print(f"missing: {', '.join(missing)} (apt-get install slurm-wlm slurmdbd "
              "slurm-client slurmrestd slurm-wlm-jwt-plugin munge mariadb-server)",
              file=sys.stderr)
        return 2
    cluster = DevCluster(Path(args.dir), shape=args.shape)
    started = time.monotonic()
    cluster.start()
    print(f"Slurm dev cluster {CLUSTER} (shape {args.shape}) up in "
          f"{time.monotonic() - started:.1f} s.\n"
          f"  export SLURM_CONF={cluster.env['SLURM_CONF']}\n"
          f"Commands in /usr/bin; Ctrl-C stops every daemon.", flush=True)
    if args.rest:
        print(f"slurmrestd: {cluster.rest_start()}\n"
              f"  token (root, 1 day): {cluster.token(lifespan_s=86400)}", flush=True)
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    sys.exit(main())
