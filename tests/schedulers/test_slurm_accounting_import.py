"""The Slurm accounting import at scale (issue 34): one upsert whatever the number of jobs,
nothing written when nothing changed, only the jobs since the last import read (plus the
unfinished ones not seen again, by id), and each job's time limit."""

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpuquota.schedulers.models import ImportCursor, SlurmJob
from gpuquota.schedulers.runner import CommandResult
from gpuquota.schedulers.services import backend_config_update
from gpuquota.schedulers.slurm import backend as slurm_backend
from gpuquota.schedulers.slurm.jobs import (
    OVERLAP,
    job_fields,
    slurm_jobs_import,
    slurm_jobs_record,
)
from tests.schedulers.conftest import NOW

pytestmark = pytest.mark.django_db
T = int(NOW.timestamp())


def _job(k: int, *, end: int = 0, limit=60, account="vision") -> dict:
    return {"job_id": 100 + k, "state": {"current": ["COMPLETED" if end else "RUNNING"]},
            "time": {"submission": T - 3600 + k, "start": T - 3000 + k, "end": end,
                     "limit": limit},
            "account": account, "user": "alice", "partition": "gpu", "qos": "normal",
            "nodes": "node-a", "reservation": {"id": 0, "name": ""},
            "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 1},
                                   {"type": "gres", "name": "gpu:h100", "count": 1}]}}


class Sacct:
    """Answers `sacct --json` with `jobs` (by `-j` those named); records the commands."""

    def __init__(self):
        self.jobs: list[dict] = []
        self.ran: list[list[str]] = []

    def run(self, argv, **kwargs):
        self.ran.append(list(argv))
        jobs = self.jobs
        if "-j" in argv:
            ids = argv[argv.index("-j") + 1].split(",")
            jobs = [j for j in jobs if str(j["job_id"]) in ids]
        return CommandResult(tuple(argv), 0, json.dumps({"jobs": jobs}), "", 0.0)


@pytest.fixture
def sacct(site, monkeypatch):
    fake = Sacct()
    monkeypatch.setattr(slurm_backend, "Runner", lambda **kwargs: fake)
    backend_config_update(cluster=site.cluster, actor=site.admin)
    return fake


def _import(site, at=NOW) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as queries:
        written = slurm_jobs_import(cluster=site.cluster, now=at)
    return written, len(queries)


def test_an_import_s_queries_do_not_grow_with_its_jobs(site, sacct):
    sacct.jobs = [_job(0)]
    _import(site)  # the first import makes the cursor
    sacct.jobs = [_job(k) for k in range(3)]
    few = _import(site, NOW + timedelta(minutes=5))
    sacct.jobs = [_job(k) for k in range(60)]
    many = _import(site, NOW + timedelta(minutes=10))
    assert (few[0], many[0]) == (2, 57) and few[1] == many[1]
    assert SlurmJob.objects.count() == 60


def test_only_new_or_changed_runs_are_written_as_the_old_code_wrote_them(site, sacct):
    sacct.jobs = [_job(1), _job(2), _job(3, account="speech")]
    assert _import(site)[0] == 3
    assert _import(site, NOW + timedelta(minutes=5))[0] == 0  # nothing changed
    sacct.jobs[0] = _job(1, end=T - 60)
    sacct.jobs.append(sacct.jobs[1])  # a run answered twice is written once
    assert _import(site, NOW + timedelta(minutes=10))[0] == 1
    rows = {j.job_id: j for j in SlurmJob.objects.all()}
    assert (rows["101"].state, rows["101"].ended_at) == ("COMPLETED", NOW - timedelta(minutes=1))
    expected = job_fields(_job(3, account="speech"))
    row = rows["103"]
    assert {k: getattr(row, k) for k in expected} == expected
    assert (row.team, rows["101"].team) == (site.teams["speech"], site.teams["vision"])


def test_reads_since_the_last_import_and_re_reads_unfinished_jobs_not_seen(site, sacct):
    sacct.jobs = [_job(1), _job(2)]
    _import(site)
    assert "-S" in sacct.ran[0] and not any("-j" in argv for argv in sacct.ran)
    # Job 102 ended before the next import's window: its end reached slurmdbd late.
    sacct.jobs = [_job(1)]
    later = NOW + timedelta(hours=2)
    sacct.ran.clear()

    def run(argv, **kwargs):
        sacct.ran.append(list(argv))
        jobs = [_job(1)] if "-S" in argv else [_job(2, end=T + 60)]
        return CommandResult(tuple(argv), 0, json.dumps({"jobs": jobs}), "", 0.0)

    sacct.run = run
    assert _import(site, later)[0] == 1
    since = (NOW - OVERLAP).strftime("%Y-%m-%dT%H:%M:%S")
    assert sacct.ran[0][sacct.ran[0].index("-S") + 1] == since
    assert sacct.ran[1][-2:] == ["-j", "102"]
    assert SlurmJob.objects.get(job_id="102").state == "COMPLETED"
    assert ImportCursor.objects.get().imported_until == later


@pytest.mark.parametrize(("limit", "seconds"), [
    (1440, 86400), ({"set": True, "infinite": False, "number": 90}, 5400),
    ({"set": True, "infinite": True, "number": 0}, None),
    ({"set": False, "infinite": False, "number": 0}, None), (None, None),
    ("UNLIMITED", None)])
def test_the_time_limit_in_every_shape(limit, seconds):
    assert job_fields(_job(1, limit=limit))["time_limit_s"] == seconds


def test_the_time_limit_is_imported(site, sacct):
    sacct.jobs = [_job(1, limit=1440)]
    _import(site)
    assert SlurmJob.objects.get().time_limit_s == 86400


def test_jobs_recorded_as_an_import_would_write_them(site):
    """`slurm_jobs_record` (the reliability benchmark's path) writes what an import of the
    same `sacct --json` answer writes, teams included, and nothing when nothing changed."""
    jobs = [_job(1, end=T - 60), _job(2, account="speech")]
    assert slurm_jobs_record(cluster=site.cluster, jobs=jobs) == 2
    assert slurm_jobs_record(cluster=site.cluster, jobs=jobs) == 0
    rows = {j.job_id: j for j in SlurmJob.objects.all()}
    assert (rows["101"].state, rows["101"].team) == ("COMPLETED", site.teams["vision"])
    assert rows["102"].team == site.teams["speech"] and rows["102"].ended_at is None
    with pytest.raises(ValueError):
        slurm_jobs_record(cluster=site.cluster, jobs=[{"job_id": 7}])
