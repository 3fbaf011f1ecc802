"""`manage.py job_report <jobid> [--cluster C]`: `jobstats` for a job id unique across
clusters."""

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from gpuquota.jobs.models import Job
from gpuquota.jobs.report import job_report
from gpuquota.jobs.text import report_text


class Command(BaseCommand):
    help = "Print a job's efficiency report; --cluster when its id is on several clusters."

    def add_arguments(self, parser):
        parser.add_argument("job")
        parser.add_argument("--cluster", default=None)

    def handle(self, *args, job, cluster, **options):
        runs = Job.objects.select_related("cluster", "team").filter(job_id=job)
        if cluster:
            runs = runs.filter(cluster__slug=cluster)
        if runs.values("cluster").distinct().count() > 1:
            raise CommandError(f"job {job!r} is on several clusters: give --cluster")
        run = runs.order_by("-started_at").first()
        if run is None:
            raise CommandError(f"no job {job!r}")
        now = timezone.now().replace(microsecond=0)
        self.stdout.write(report_text(job_report(job=run, now=now)))
