"""What the jobs app tells a job's owner on the channels they added themselves
(`gpuquota.core.contributions.user_event`), beside the mail: a zero-use warning, the last
warning, the stop, and the note about a wasteful job. Keys are the mail's, so each is told
once per channel whatever the retries."""

from django.urls import reverse

from gpuquota.core.contributions import user_event
from gpuquota.jobs.models import Job
from gpuquota.mail.conf import base_url
from gpuquota.outbox.render import Message


def job_tell(job: Job, *, event: str, key: str, title: str, text: str,
             facts: list[tuple[str, str]], data: dict | None = None) -> None:
    """In the caller's transaction: the job's owner hears `event` on their own channels."""
    if job.owner_id is None:
        return
    user_event(user_id=job.owner_id, key=key, message=Message(
        event=event, title=f"Job {job.job_id} on {job.cluster.name}: {title}", text=text,
        facts=[("Job", f"{job.job_id} ({job.cluster.name})"), *facts],
        link=base_url() + reverse("job_detail", args=[job.pk]),
        data={"job": job.pk, "job_id": job.job_id, "cluster": job.cluster.slug,
              **(data or {})}))
