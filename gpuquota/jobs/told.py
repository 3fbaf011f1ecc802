"""What job reports tell a team's channels (`gpuquota.core.contributions.team_event`), with
the mail (docs/jobs.md, "On the team's channels"): each step of a zero-use job (the first
warning, the last warning, the stop or the scheduler's refusal) under the step's mail key,
in the step's transaction; and the week's digest, one message per team per week, with the
team's figures and pitfalls but not its users ranked (that stays in the leads' mail). The
mail about one wasteful job stays the owner's alone."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Sum
from django.urls import reverse

from gpuquota.core.contributions import team_event
from gpuquota.jobs.models import Job, JobNote
from gpuquota.jobs.selectors import Efficiency
from gpuquota.jobs.zero_use import ZeroUse
from gpuquota.mail.conf import base_url
from gpuquota.outbox.render import Message, when_utc

NEXT_IF_NOT_OPTED_IN = "nothing is stopped here (the site has not opted in): it runs until it ends"
AFTER_STOP = {
    "cancelled": "the job is over; resubmit it once it will use its GPUs",
    "requeued": "the job pends again and restarts from its last checkpoint",
    "deleted": "the pod is gone; start it again once it will use its GPUs",
    "suspended": "the Job is suspended (its Workload deactivated under Kueue); its owner "
                 "resumes it with spec.suspend: false (or the Workload's spec.active: true)",
}


def _who(job: Job) -> str:
    return job.owner.username if job.owner is not None else (job.user_name or "unknown")


def _tell(job: Job, clock: ZeroUse, *, event: str, key: str, title: str, next_step: str,
          gpus: list[str], extra: dict | None = None) -> None:
    idle_min = clock.idle_s // 60
    team_event(team_id=job.team_id, key=key, message=Message(
        event=event,
        title=f"{job.team.name}: {job.cluster.name} job {job.job_id} {title}",
        text=(f"Job {job.job_id} of {_who(job)} on {job.cluster.name} holds {len(gpus)} GPU(s) "
              f"and all have been at 0 % for {idle_min} min (since {when_utc(clock.since)}). "
              f"Next: {next_step}."),
        facts=[("Job", f"{job.job_id} ({job.get_source_display()}, {job.cluster.name})"),
               ("User", _who(job)), ("GPUs", ", ".join(gpus) or "none"),
               ("Idle", f"{idle_min} min since {when_utc(clock.since)}"), ("Next", next_step)],
        link=base_url() + reverse("job_detail", args=[job.pk]),
        data={"job": job.pk, "job_id": job.job_id, "cluster": job.cluster.slug,
              "source": job.source, "team": job.team.slug, "user": _who(job), "gpus": gpus,
              "zero_since": clock.since.isoformat(), "idle_s": clock.idle_s,
              "next": next_step, **(extra or {})}))


def zero_use_warned_tell(job: Job, clock: ZeroUse, *, key: str, gpus: list[str],
                         stop_at: datetime | None, action: str) -> None:
    """The first warning of a stretch, under its mail key."""
    if job.team_id is None:
        return
    next_step = (f"{action} at {when_utc(stop_at)} unless a GPU works again, after a last "
                 "warning" if stop_at else NEXT_IF_NOT_OPTED_IN)
    _tell(job, clock, event="job.zero_use_warned", key=key, title="at zero use: warned",
          next_step=next_step, gpus=gpus,
          extra={"stop_at": stop_at.isoformat() if stop_at else None, "action": action})


def zero_use_last_warning_tell(job: Job, clock: ZeroUse, *, key: str, gpus: list[str],
                               stop_at: datetime, action: str) -> None:
    """The last warning before the stop, under its mail key."""
    if job.team_id is None:
        return
    _tell(job, clock, event="job.zero_use_last_warning", key=key,
          title=f"to be {action} at {when_utc(stop_at)}",
          next_step=f"{action} at {when_utc(stop_at)} unless a GPU works again",
          gpus=gpus, extra={"stop_at": stop_at.isoformat(), "action": action})


def zero_use_stopped_tell(job: Job, clock: ZeroUse, *, key: str, gpus: list[str], how: str,
                          detail: str, refused: bool) -> None:
    """The stop as the scheduler showed it (`how`: cancelled, requeued, deleted,
    suspended), or its refusal (`how` = refused, `detail` the reason; tried again later)."""
    if job.team_id is None:
        return
    next_step = (("tried again while it stays at zero, 15 min later, then twice as long "
                  f"each time, at most every 4 h ({detail})") if refused
                 else AFTER_STOP.get(how, f"the job was {how}") + (f" ({detail})" if detail
                                                                     else ""))
    _tell(job, clock, event="job.zero_use_stopped", key=key,
          title="could not be stopped" if refused else how, next_step=next_step, gpus=gpus,
          extra={"how": how, "refused": refused, "detail": detail})


def team_digest_tell(*, team, key: str, since: datetime, until: datetime,
                     figures: Efficiency, jobs) -> None:
    """The week's digest of one team's jobs, once per team and week (the leads' mail key):
    its figures and its pitfalls by GPU-hours wasted; the users' ranking is left to the
    leads' mail and the team's jobs page."""
    pitfalls = list(JobNote.objects.filter(job__in=jobs, severity="waste").order_by()
                    .values("code").annotate(wasted=Sum("wasted_gpu_s"))
                    .order_by("-wasted", "code")[:5])
    efficiency = "n/a" if figures.efficiency_pct is None else f"{figures.efficiency_pct} %"
    team_event(team_id=team.pk, key=key, message=Message(
        event="job.team_digest",
        title=f"{team.name}: jobs of the week of {since:%Y-%m-%d}",
        text=(f"{figures.jobs} job(s) held {figures.held_hours} GPU-hours from "
              f"{when_utc(since)} to {when_utc(until)}; notes wasted {figures.wasted_hours} "
              f"GPU-hours (efficiency {efficiency})."),
        facts=[("GPU-hours held", figures.held_hours),
               ("GPU-hours wasted", figures.wasted_hours), ("Efficiency", efficiency)]
        + [(p["code"], f"{p['wasted'] / 3600:.1f} GPU-hours wasted") for p in pitfalls],
        link=base_url() + reverse("team_jobs", args=[team.slug]),
        data={"team": team.slug, "since": since.isoformat(), "until": until.isoformat(),
              "jobs": figures.jobs, "held_gpu_s": figures.held_gpu_s,
              "wasted_gpu_s": figures.wasted_gpu_s, "efficiency_pct": figures.efficiency_pct,
              "pitfalls": {p["code"]: p["wasted"] for p in pitfalls}}))
