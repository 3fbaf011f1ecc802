"""slurmrestd, Slurm's REST API, read with a JWT (`rest_auth/jwt`): the accounting of jobs
(through slurmdbd) and the GPU indices of running jobs (through slurmctld), in the OpenAPI
version Slurm 22.05 serves (v0.0.38).

Only reads go this way. Every write stays on the commands (`gpuquota.schedulers.runner`):
22.05's REST API cannot create or change reservations, nor QOS limits. Observe stays on them
too, so that it reads the same answers the writes are planned from.

Every failure (slurmrestd unreachable or too slow, an HTTP error, an answer that is not a
JSON object, or one that lists `errors`) becomes a `BackendError` with the request and the
answer as its detail, and each request is logged like the runner logs a command. The token
travels in a header, never in the URL, so it is never logged.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

import requests
from django.utils import timezone

from gpuquota.schedulers.backend import BackendError
from gpuquota.schedulers.slurm.objects import RunningGpu, gres_indices, hostlist_expand

log = logging.getLogger(__name__)
API_VERSION = "v0.0.38"
ANSWER_LOGGED_CHARS = 2000


class SlurmRest:
    """One cluster's slurmrestd at `url`, asked as the Slurm user `user` with `token` (a JWT
    from `scontrol token username=<user>`)."""

    def __init__(self, *, url: str, user: str, token: str, timeout_s: float):
        self.url = url.rstrip("/")
        self.user = user
        self.token = token
        self.timeout_s = timeout_s

    def get(self, path: str, params: dict[str, str] | None = None) -> dict:
        """The JSON object slurmrestd answers at `path`; BackendError on any failure."""
        if not self.token:
            raise BackendError("slurmrestd needs a token: store one in the cluster's token "
                               "field (scontrol token username=<rest_user>)")
        url = f"{self.url}/{path}"
        request = f"GET {url}" + (f" {params}" if params else "")
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token,
                   "Accept": "application/json"}
        started = time.monotonic()
        try:
            answer = requests.get(url, params=params, headers=headers, timeout=self.timeout_s)
        except requests.Timeout as exc:
            log.warning("%s timed out after %ss", request, self.timeout_s)
            raise BackendError(f"slurmrestd did not answer within {self.timeout_s} s",
                               detail=request) from exc
        except requests.RequestException as exc:
            log.warning("%s failed: %s", request, exc)
            raise BackendError(f"slurmrestd could not be reached at {self.url}",
                               detail=f"{request}\n{exc}") from exc
        log.info("%s: HTTP %s in %.2fs; %r", request, answer.status_code,
                 time.monotonic() - started, answer.text[:ANSWER_LOGGED_CHARS])
        detail = f"{request}\nHTTP {answer.status_code}\n{answer.text[:ANSWER_LOGGED_CHARS]}"
        try:
            body = answer.json()
        except ValueError:
            body = None
        errors = body.get("errors") if isinstance(body, dict) else None
        if errors:
            raise BackendError(f"slurmrestd answered an error: {_error_text(errors)}"[:250],
                               detail=detail)
        if answer.status_code >= 400:
            lines = [] if isinstance(body, dict) else answer.text.strip().splitlines()
            said = lines[0] if lines else answer.reason or "no text"
            raise BackendError(f"slurmrestd answered HTTP {answer.status_code}: {said}"[:250],
                               detail=detail)
        if not isinstance(body, dict):
            raise BackendError("slurmrestd answered something that is not a JSON object",
                               detail=detail)
        return body

    def version(self) -> str:
        """Slurm's version, from the meta of a ping (which slurmctld answers only to a
        valid token)."""
        meta = self.get(f"slurm/{API_VERSION}/ping").get("meta") or {}
        slurm = meta.get("Slurm") or meta.get("slurm") or {}
        numbers = slurm.get("version") or {}
        release = slurm.get("release") or ".".join(
            str(numbers[k]) for k in ("major", "minor", "micro") if k in numbers)
        if not release:
            raise BackendError("slurmrestd's ping names no Slurm version", detail=str(meta)[:2000])
        return str(release)

    def accounting_jobs(self, since: datetime) -> list[dict]:
        """The jobs slurmdbd recorded from `since` until now, each run of a requeued job
        apart, in the shape of `sacct --json -a -X -D` (both print through Slurm's one data
        parser; the REST answer adds the steps, which are not read)."""
        # Relative to slurmrestd's clock: a time written out would be read in its time zone.
        seconds = max(0, int((timezone.now() - since).total_seconds()))
        path = f"slurmdb/{API_VERSION}/jobs"
        body = self.get(path, {"start_time": f"now-{seconds}seconds", "end_time": "now"})
        jobs = body.get("jobs")
        if not isinstance(jobs, list):
            raise BackendError("slurmrestd's job accounting has no list of jobs",
                               detail=f"GET {self.url}/{path}\n{str(body)[:2000]}")
        return jobs

    def accounting_job(self, job_id: str) -> list[dict]:
        """Each run slurmdbd recorded of one job (`slurmdb/.../job/<id>`), in the shape of
        `accounting_jobs`."""
        path = f"slurmdb/{API_VERSION}/job/{job_id}"
        jobs = self.get(path).get("jobs")
        if not isinstance(jobs, list):
            raise BackendError("slurmrestd's job accounting has no list of jobs",
                               detail=f"GET {self.url}/{path}")
        return jobs

    def running_job_gpus(self) -> list[RunningGpu]:
        """The GPUs of each running job on each of its nodes, in node order, from
        slurmctld's `gres_detail` (`gpu:h100:2(IDX:0-1)`, one entry per node)."""
        path, found = f"slurm/{API_VERSION}/jobs", []
        try:
            for job in self.get(path).get("jobs") or []:
                state = job.get("job_state")
                if (state[0] if isinstance(state, list) and state else state) != "RUNNING":
                    continue
                allocated = (job.get("job_resources") or {}).get("allocated_nodes") or []
                nodes = [str(n["nodename"]) for n in allocated] or hostlist_expand(
                    job.get("nodes") or "")
                for node, detail in zip(nodes, job.get("gres_detail") or [], strict=False):
                    found += [RunningGpu(str(job["job_id"]), str(job.get("account") or ""),
                                         str(job.get("user_name") or ""), node, index)
                              for index in gres_indices(str(detail))]
        except (AttributeError, KeyError, TypeError) as exc:
            raise BackendError(f"slurmrestd's running jobs are malformed: {exc}",
                               detail=f"GET {self.url}/{path}") from exc
        return found


def _error_text(errors) -> str:
    first = errors[0] if isinstance(errors, list) else errors
    if not isinstance(first, dict):
        return str(first)
    text = first.get("description") or first.get("error") or "unnamed error"
    return f"{text} ({first['source']})" if first.get("source") else str(text)
