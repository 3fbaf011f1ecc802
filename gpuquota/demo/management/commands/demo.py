"""`manage.py demo`: the embedded default, live.

Runs the web server, one simulated agent per demo node (real HTTP to the real
ingestion endpoint) and, with no broker, the beat schedule on an in-process
timer. Run `seed_demo` first (`make demo` does).
"""

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

from celery.schedules import maybe_schedule, schedule
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from gpuquota.celery import app, collect_beat_schedule
from gpuquota.demo.organisation import (
    DEMO_PASSWORD,
    FAULTY_NODE,
    HEALTHY_PROFILES,
    TEAMS,
    DemoNode,
    demo_agent_tokens_issue,
    demo_nodes,
    demo_unix_users,
)
from gpuquota.demo.slurm import slurm_demo_nodes
from gpuquota.lending.demo import demo_borrowers_write

STOP_GRACE_S = 10  # how long each group of children has to stop after a Ctrl-C


class Command(BaseCommand):
    help = "Run the demo: web server, simulated agents for every demo node, in-process beat."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000", help="host:port to serve on")
        parser.add_argument("--window", type=int, default=10, help="agents' window, seconds")
        parser.add_argument("--no-agents", action="store_true", help="serve without agents")
        parser.add_argument("--no-agents-in", action="append", default=[], metavar="CLUSTER",
                            help="no agents for this cluster's nodes (another source reports "
                                 "them: `manage.py telemetry_demo`)")
        parser.add_argument("--dev-slurm-agents", action="store_true",
                            help="also simulated agents for the dev Slurm cluster's nodes "
                                 "(`manage.py slurm_demo` seeds them)")
        parser.add_argument(
            "--beat-cap",
            type=float,
            default=15.0,
            help="run interval beat entries at least this often (seconds), so the demo moves",
        )

    def handle(self, *args, addr, window, no_agents, beat_cap, no_agents_in=(),
               dev_slurm_agents=False, **options):
        if not settings.CELERY_TASK_ALWAYS_EAGER:
            raise CommandError("`demo` is the embedded default; with REDIS_URL run celery workers")
        url = f"http://{addr}"
        # A TERM (`timeout`, a service manager) or a closed terminal stops the demo like
        # Ctrl-C. The children run in sessions of their own, so those signals reach only this
        # process, which stops them in order: agents and the web server are never left running.
        self._stopping, self._hurry = threading.Event(), threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        children = [self._serve(addr)]
        try:
            self._wait_until_up(url)
            if not no_agents:
                nodes = demo_nodes() + (slurm_demo_nodes() if dev_slurm_agents else [])
                children += self._start_agents(url, window, nodes=nodes, skip=set(no_agents_in))
            self._banner(url)
            self._run_beat(beat_cap)
        except KeyboardInterrupt:
            pass
        finally:
            self._stop(agents=children[1:], server=children[:1])

    def _on_signal(self, _signum, _frame) -> None:
        """The first Ctrl-C or TERM interrupts the demo, which then stops its children in
        order; another one while it does (an impatient user, a service manager) cuts the
        wait short and kills them. It never interrupts the stopping itself, which would
        leave them running."""
        if self._stopping.is_set():
            if not self._hurry.is_set():
                self.stderr.write("Stopping at once: killing the agents and the web server.")
            self._hurry.set()
            return
        self._stopping.set()
        raise KeyboardInterrupt

    def _stop(self, *, agents: list[subprocess.Popen], server: list[subprocess.Popen]) -> None:
        """Stop the agents first, so their last batches still reach the web server, then
        the server; each group gets `STOP_GRACE_S`, unless a second signal hurries it."""
        self._stopping.set()
        for group in (agents, server):
            for child in group:
                child.send_signal(signal.SIGINT)
            deadline = time.monotonic() + STOP_GRACE_S
            for child in group:
                while (child.poll() is None and not self._hurry.is_set()
                       and time.monotonic() < deadline):
                    self._hurry.wait(0.1)
                if child.poll() is None:
                    child.kill()
                child.wait()

    def _serve(self, addr: str) -> subprocess.Popen:
        command = [sys.executable, "manage.py", "runserver", addr, "--noreload"]
        # Agents post every few seconds: keep the access log to errors.
        env = {"LOGIN_LOG_LEVEL": "WARNING", **os.environ, "ACCESS_LOG_LEVEL": "WARNING"}
        return subprocess.Popen(command, cwd=settings.BASE_DIR, env=env, start_new_session=True)

    def _wait_until_up(self, url: str) -> None:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=2).read()
                return
            except OSError:
                time.sleep(0.5)
        raise CommandError(f"the web server did not answer at {url}")

    def _start_agents(self, url: str, window: int, nodes: list[DemoNode],
                      skip: set) -> list[subprocess.Popen]:
        var = Path(settings.VAR_DIR) / "demo"
        users = ",".join(demo_unix_users())
        accounts = ",".join(TEAMS)
        agents = []
        for demo, token_file in demo_agent_tokens_issue(directory=str(var / "tokens"),
                                                        nodes=nodes):
            if demo.cluster in skip:
                continue
            command = [
                sys.executable, "-m", "agent",
                "--server", url,
                "--token-file", token_file,
                "--hostname", demo.hostname,
                "--simulate", str(demo.gpus),
                "--seed", "0",
                "--simulate-model", demo.model_name,
                "--simulate-users", demo.users or users,
                "--simulate-accounts", demo.accounts or accounts,
                "--window", str(window),
                "--poll", "2",
                "--spool-dir", str(var / "spool" / demo.hostname),
                "--log-level", "WARNING",
            ]  # fmt: skip
            if demo.gpu_jobs_dir:  # Slurm runs the jobs, borrowers' included
                command += ["--gpu-jobs-dir", demo.gpu_jobs_dir]
            else:
                command += ["--simulate-borrowers-file", self._borrowers_file()]
            if demo.hostname == FAULTY_NODE:
                command += ["--simulate-fail-after", "120"]  # a lost GPU soon after start
            else:
                command += ["--simulate-profiles", demo.profiles or HEALTHY_PROFILES]
            agents.append(subprocess.Popen(command, cwd=settings.BASE_DIR,
                                           start_new_session=True))
        self.stdout.write(f"Started {len(agents)} simulated agents ({window} s windows).")
        return agents

    @staticmethod
    def _borrowers_file() -> str:
        """Where the demo, standing in for a site's scheduler, tells the simulated agents
        which lent GPUs run preemptible work (`gpuquota.lending.demo`)."""
        return str(Path(settings.VAR_DIR) / "demo" / "borrowers.json")

    def _banner(self, url: str) -> None:
        logins = ", ".join(["admin"] + [f"{slug}-lead, {slug}-member" for slug in TEAMS])
        self.stdout.write(self.style.SUCCESS(f"\ngpuquota demo is running at {url}/"))
        self.stdout.write(f"Logins (password '{DEMO_PASSWORD}'): {logins}")
        if settings.EMAIL_BACKEND.endswith("filebased.EmailBackend"):
            self.stdout.write(f"Mail is written to {settings.EMAIL_FILE_PATH}/ (a file per send).")
        self.stdout.write("Press Ctrl-C to stop.\n")

    def _run_beat(self, cap_s: float) -> None:
        """Call every beat entry when due, in this process (no broker in the embedded default)."""
        app.finalize()
        logging.getLogger("celery.app.trace").setLevel(logging.WARNING)
        entries = collect_beat_schedule()
        schedules, last_run = {}, {}
        for name, entry in entries.items():
            every = maybe_schedule(entry["schedule"], app=app)
            if type(every) is schedule:
                # Interval jobs run at once and then often; calendar jobs (monthly
                # statements...) keep their calendar.
                if every.run_every.total_seconds() > cap_s:
                    every = schedule(timedelta(seconds=cap_s), app=app)
                last_run[name] = datetime.fromtimestamp(0, UTC)
            else:
                last_run[name] = timezone.now()
            schedules[name] = every
        while True:
            for name, entry in entries.items():
                due, _next = schedules[name].is_due(last_run[name])
                if not due:
                    continue
                last_run[name] = timezone.now()
                try:
                    app.tasks[entry["task"]].apply(
                        args=entry.get("args", ()), kwargs=entry.get("kwargs", {})
                    ).get()
                except Exception as exc:  # one failing job must not stop the demo's clock
                    self.stderr.write(f"beat {name}: {exc!r}")
            try:  # borrowers start on lent GPUs and stop on returned ones within a second
                demo_borrowers_write(path=self._borrowers_file(), at=timezone.now())
            except Exception as exc:  # noqa: BLE001 - as a beat job: never stop the demo
                self.stderr.write(f"lending borrowers: {exc!r}")
            time.sleep(1)
