"""`manage.py slurm_demo`: the demo (`manage.py demo`) with the project's dev Slurm cluster
running beside it and seeded into it (`gpuquota.demo.slurm`): reservations made in the web
pages reach real Slurm daemons. Needs root and Debian's Slurm, munge and MariaDB. Run
`seed_demo` first (`make demo SLURM=1` does); Ctrl-C or TERM stops the cluster with the
demo."""

import logging
import os
import signal
import time

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from gpuquota.demo.slurm import (
    devcluster,
    slurm_demo_dir,
    slurm_demo_jobs,
    slurm_demo_seed,
    slurm_demo_unavailable,
)
from gpuquota.inventory.models import Cluster


def _interrupt(_signum, _frame):
    raise KeyboardInterrupt


class Command(BaseCommand):
    help = "Run the demo with the dev Slurm cluster (gqdev) as one of its clusters."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000", help="host:port to serve on")

    def handle(self, *args, addr, **options):
        reason = slurm_demo_unavailable()
        if reason:
            raise CommandError(reason)
        if not Cluster.objects.filter(slug="ada").exists():
            raise CommandError("No demo organisation: run `manage.py seed_demo` first.")
        # Each reconcile runs a dozen commands: their log lines would bury the banner, here
        # and in the web server (a reservation asks for a reconcile when it commits).
        os.environ.setdefault("SCHEDULER_COMMAND_LOG_LEVEL", "WARNING")
        logging.getLogger("gpuquota.schedulers.runner").setLevel(
            os.environ["SCHEDULER_COMMAND_LOG_LEVEL"])
        # A TERM while the cluster starts stops it like Ctrl-C (the demo then takes over).
        signal.signal(signal.SIGTERM, _interrupt)
        cluster = devcluster.DevCluster(slurm_demo_dir())
        began = time.monotonic()
        try:
            cluster.start()
        except RuntimeError as exc:
            raise CommandError(f"The dev Slurm cluster did not start: {exc}") from exc
        except KeyboardInterrupt:
            return
        try:
            slurm_conf = cluster.env["SLURM_CONF"]
            slurm_demo_seed(slurm_conf=slurm_conf, now=timezone.now())
            self._tell(slurm_conf, time.monotonic() - began)
            call_command("demo", addr=addr, dev_slurm_agents=True)
        except KeyboardInterrupt:
            pass
        finally:
            self.stdout.write("Stopping the dev Slurm cluster...")
            cluster.stop()

    def _tell(self, slurm_conf: str, took_s: float) -> None:
        self.stdout.write(self.style.SUCCESS(
            f"Dev Slurm cluster {devcluster.CLUSTER} up in {took_s:.0f} s "
            f"({', '.join(devcluster.NODES)}, {devcluster.GPUS_PER_NODE} GPUs each), "
            "seeded as a demo cluster."))
        self.stdout.write("In another root shell (docs/slurm.md, \"The demo on the dev "
                          "cluster\"):")
        self.stdout.write(f"  export SLURM_CONF={slurm_conf}")
        for job in slurm_demo_jobs():
            self.stdout.write(f"  # {job.what}\n  {job.command}")
        self.stdout.write("  squeue -o '%.5i %.10a %.12q %.8T %R'   # where each job runs, or "
                          "why it pends\n")
