"""Job pages: one job's report, "My jobs", a team's jobs, the fleet's waste (admins), and the
opt-out of the mail about wasteful jobs. Views parse, ask the permissions, render."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone

from accounts.permissions import require_admin, team_for_view
from gpuquota.core.timeutil import Period
from gpuquota.jobs import pages
from gpuquota.jobs.models import Job, JobMailOptOut
from gpuquota.jobs.selectors import job_can_view
from gpuquota.jobs.services import job_mail_opt_out_set


def _now():
    return timezone.now().replace(microsecond=0)


@login_required
def job_detail(request, pk: int):
    job = Job.objects.select_related("cluster", "team", "owner").filter(pk=pk).first()
    if job is None or not job_can_view(request.user, job):
        raise Http404("No such job.")
    return render(request, "jobs/job.html", pages.job_page_context(job=job, now=_now()))


@login_required
def my_jobs(request):
    return render(request, "jobs/mine.html", pages.my_jobs_context(user=request.user,
                                                                   now=_now()))


@login_required
def team_jobs(request, slug: str):
    team = team_for_view(request.user, slug)
    return render(request, "jobs/team.html",
                  pages.team_jobs_context(team=team, user=request.user, now=_now()))


@login_required
def fleet_jobs(request):
    require_admin(request.user)
    month = request.GET.get("month")
    now, status = _now(), 200
    try:
        period = Period.parse_month(month) if month else Period.month(now.year, now.month)
    except ValueError:
        messages.error(request, "month: give it as YYYY-MM.")
        period, status = Period.month(now.year, now.month), 400
    return render(request, "jobs/fleet.html", pages.fleet_jobs_context(period=period),
                  status=status)


@login_required
def job_mail(request):
    if request.method == "POST":
        opted_out = request.POST.get("mail") == "off"
        job_mail_opt_out_set(user=request.user, opted_out=opted_out, now=_now())
        messages.success(request, "You will not be mailed about your jobs." if opted_out
                         else "You will be mailed about a job that wastes GPU-hours.")
        return redirect("job_mail")
    opted_out = JobMailOptOut.objects.filter(user=request.user).exists()
    return render(request, "jobs/mail.html", {"opted_out": opted_out})
