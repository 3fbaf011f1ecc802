"""`manage.py slurm_reconcile --cluster NAME [--dry-run | --export DIR | --remove]`: one
reconcile of a Slurm cluster by hand, its dry run (the commands it would run), the plan as
files, or gpuquota taken off the cluster (what it created deleted, the site's own settings
put back, the backend switched off). It waits for a reconcile already running (one queued
when the configuration was saved) and exits non-zero if that one does not end in time."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from gpuquota.inventory.models import Cluster
from gpuquota.schedulers.backend import BackendError
from gpuquota.schedulers.models import BackendConfig, ReconcileRun
from gpuquota.schedulers.reconcile import cluster_plan, cluster_reconcile, cluster_remove

WAIT_S = 120


class Command(BaseCommand):
    help = "Reconcile one Slurm cluster with gpuquota's reservations, quotas and loans."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True, help="the cluster's name or slug")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--dry-run", action="store_true",
                          help="print the commands it would run; change nothing")
        mode.add_argument("--export", metavar="DIR",
                          help="write the whole plan as files a site applies itself")
        mode.add_argument("--remove", action="store_true",
                          help="delete every object gpuquota created on the cluster, put the "
                          "site's own settings back and switch the backend off")
        parser.add_argument("--wait", type=float, default=WAIT_S, metavar="SECONDS",
                            help="how long to wait for a reconcile already running")

    def handle(self, *args, cluster, dry_run, export, remove=False, wait=WAIT_S, **options):
        found = Cluster.objects.filter(Q(name=cluster) | Q(slug=cluster),
                                       scheduler=Cluster.Scheduler.SLURM).first()
        if found is None:
            raise CommandError(f"No Slurm cluster named {cluster!r}.")
        if not BackendConfig.objects.filter(cluster=found).exists():
            raise CommandError(f"{found} has no backend configuration (admin pages).")
        if export:
            try:
                backend, plan = cluster_plan(cluster=found)
            except BackendError as exc:
                raise CommandError(exc.message) from exc
            target = Path(export)
            target.mkdir(parents=True, exist_ok=True)
            for name, content in backend.export(plan).items():
                (target / name).write_text(content)
                self.stdout.write(str(target / name))
            return
        if remove:
            summary = cluster_remove(cluster=found, wait_s=wait)
        else:
            summary = cluster_reconcile(cluster=found, reason="manage.py slurm_reconcile",
                                        dry_run=dry_run, wait_s=wait)
        if summary.outcome == "busy":
            raise CommandError(f"{found}: another reconcile is still running after {wait:g} s "
                               "(one starts when the configuration is saved); nothing was "
                               "done. Run this again in a minute.")
        if dry_run:
            run = ReconcileRun.objects.filter(cluster=found).first()
            for command in (run.commands if run else []):
                self.stdout.write(command)
        for action in summary.actions if not dry_run else []:
            self.stdout.write(action)
        self.stdout.write(f"{found}: {summary.outcome}"
                          + (f", {summary.drift} drifted" if summary.drift else "")
                          + (f": {summary.error}" if summary.error else ""))
        if summary.outcome in ("failed", "partial"):
            raise CommandError(summary.error)
