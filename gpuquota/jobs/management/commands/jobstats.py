"""`manage.py jobstats <cluster> <job>`: a job's report as text (docs/jobs.md)."""

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from gpuquota.jobs.models import Job
from gpuquota.jobs.report import job_report
from gpuquota.jobs.services import jobs_collect
from gpuquota.jobs.text import report_text


class Command(BaseCommand):
    help = "Print a job's efficiency report (GPUs, utilization, memory, cost, notes)."

    def add_arguments(self, parser):
        parser.add_argument("cluster", help="the cluster's slug or name")
        parser.add_argument("job", help="the Slurm job id, the pod's name, or pid@start")
        parser.add_argument("--collect", action="store_true",
                            help="collect the cluster's recent jobs first (from an epilog)")

    def handle(self, *args, cluster, job, collect, **options):
        now = timezone.now().replace(microsecond=0)
        if collect:
            jobs_collect(now=now)
        found = (Job.objects.select_related("cluster", "team", "owner")
                 .filter(job_id=job).filter(cluster__slug=cluster)
                 | Job.objects.filter(job_id=job, cluster__name=cluster))
        run = found.order_by("-started_at").first()
        if run is None:
            raise CommandError(f"no job {job!r} on cluster {cluster!r} (run with --collect "
                               "if it has just ended)")
        self.stdout.write(report_text(job_report(job=run, now=now)))
