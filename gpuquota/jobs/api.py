"""Job reports API under /api/v1/jobs: the jobs the caller may read (its own, its teams';
admins: all), worst offenders first, each with its stored figures and notes; and one job's
report computed now. Errors in the one format of gpuquota.core.api."""

from datetime import timedelta

from django.http import Http404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import team_for_view
from gpuquota.core.api import ERRORS
from gpuquota.core.api_fields import query_parse
from gpuquota.jobs import serializers as s
from gpuquota.jobs.models import Job
from gpuquota.jobs.profiling import profile_figures
from gpuquota.jobs.report import job_report, utilization_chart_points
from gpuquota.jobs.selectors import job_can_view, jobs_listed, jobs_visible


class JobListView(generics.ListAPIView):
    """Jobs the caller may read that ran in the last `days`, most GPU-hours wasted first."""

    serializer_class = s.JobSerializer

    def get_queryset(self):
        query = query_parse(s.JobQuerySerializer, self.request)
        user = self.request.user
        jobs = jobs_visible(user=user)
        if query.get("team"):
            jobs = jobs.filter(team=team_for_view(user, query["team"]))
        if query.get("mine"):
            jobs = jobs.filter(owner=user)
        if query.get("cluster"):
            jobs = jobs.filter(cluster__slug=query["cluster"])
        if query.get("job_id"):
            jobs = jobs.filter(job_id=query["job_id"])
        since = timezone.now() - timedelta(days=query.get("days") or 7)
        return jobs_listed(jobs=jobs, since=since)

    @extend_schema(parameters=[s.JobQuerySerializer],
                   responses={200: s.JobSerializer(many=True), 400: ERRORS[400],
                              404: ERRORS[404]})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


def report_data(job: Job, now) -> dict:
    report = job_report(job=job, now=now)
    a = report.analysis
    notes = [{"code": n.code, "severity": n.severity, "title": n.title, "advice": n.advice,
              "wasted_gpu_s": n.wasted_gpu_s, "wasted_cost": report.wasted_cost(n.wasted_gpu_s)}
             for n in a.notes]
    gpus = [{"gpu": g.key, "gpu_class": report.classes.get(g.key, ""), "sampled_s": g.sampled_s,
             "idle_s": g.idle_s, "util_avg_pct": g.util_avg_pct, "util_max_pct": g.util_max_pct,
             "memory_max_bytes": g.memory_max_bytes, "memory_total_bytes": g.memory_total_bytes,
             "energy_j": g.energy_j, "profiling": profile_figures(g.profile),
             "utilization": [[at.isoformat(), None if v is None else round(v, 1)]
                             for at, v in utilization_chart_points(series, start=job.started_at,
                                                                   end=report.end)]}
            for g, series in zip(a.gpus, report.series, strict=True)]
    return {"job": job, "duration_s": a.duration_s, "held_gpu_s": a.held_gpu_s,
            "sampled_gpu_s": a.sampled_gpu_s, "idle_gpu_s": a.idle_gpu_s,
            "idle_share_pct": a.idle_share_pct, "util_avg_pct": a.util_avg_pct,
            "wasted_gpu_s": a.wasted_gpu_s, "cost": report.cost,
            "wasted_cost": report.wasted_cost(a.wasted_gpu_s), "currency": report.currency,
            "energy_j": a.energy_j, "profiling": profile_figures(a.profile), "gpus": gpus,
            "notes": notes}


class JobDetailView(APIView):
    @extend_schema(responses={200: s.JobReportSerializer, 404: ERRORS[404]},
                   summary="One job's report, computed now: GPUs, utilization and memory per "
                           "GPU over time, cost, and the notes with their waste")
    def get(self, request, pk: int):
        job = Job.objects.select_related("cluster", "team", "owner").filter(pk=pk).first()
        if job is None or not job_can_view(request.user, job):
            raise Http404("No such job.")
        now = timezone.now().replace(microsecond=0)
        return Response(s.JobReportSerializer(report_data(job, now)).data)
