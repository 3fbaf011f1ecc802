"""Slurm jobs that dcgm-exporter names (`hpc_job`) are owned as the agent's would be: the
account and user of the run Slurm's accounting import stored (SlurmJob) for the window;
a job it does not know is unattributed, counted and shown on the fleet page; a live pull
of such a source waits (boundedly) for the accounting import to reach a window."""

from datetime import UTC, datetime

import pytest
from django.test import Client
from django.urls import reverse

from gpuquota.ingest.models import ProcessRecord
from gpuquota.schedulers.models import BackendConfig, ImportCursor, SlurmJob
from gpuquota.schedulers.slurm.jobs import job_fields
from gpuquota.telemetry import conf
from gpuquota.telemetry.exposition import exposition_parse
from gpuquota.telemetry.importer import range_import
from gpuquota.telemetry.models import ScrapedReading, TelemetrySource
from gpuquota.telemetry.services import source_pull
from tests.telemetry.exporter import FakeExporter, Gpu, Reading, exposition

pytestmark = pytest.mark.django_db

T0 = 1_794_729_600  # 2026-11-15T08:00:00Z
GPU = Gpu(uuid="GPU-0d000000-0000-4000-8000-000000000000", hostname="h1", uuid_label="uuid",
          hostname_label="hostname", prof=False, fields="default")


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _run(cluster, job_id: str, *, account: str, user: str, start: int, end: int | None):
    SlurmJob.objects.create(cluster=cluster, **job_fields({
        "job_id": int(job_id), "state": {"current": ["RUNNING" if end is None else "REQUEUED"]},
        "time": {"submission": start - 30, "start": start, "end": end or 0},
        "account": account, "user": user, "nodes": "h1"}))


@pytest.fixture
def source(cluster):
    cluster.scheduler = "slurm"
    cluster.save()
    return TelemetrySource.objects.create(name="hpc", cluster=cluster, kind="exporter",
                                          urls="http://h1.example.org:9400/metrics",
                                          window_s=60, scrape_interval_s=10)


def _scrape(source, seconds: range, jobs) -> None:
    ScrapedReading.objects.bulk_create(
        ScrapedReading(source=source, url="http://h1.example.org:9400/metrics", at=T0 + s,
                       series=exposition_parse(exposition([(
                           Gpu(**{**GPU.__dict__, "hpc_jobs": jobs(s)}), Reading(util=60))]),
                           where="t"))
        for s in seconds)


def test_hpc_jobs_get_the_account_and_user_of_their_run(source):
    """Job 7 was requeued: its first run (account physics) ended at minute 5, its second
    (account chemistry, another user) ran on; job 8 shares the GPU from minute 10; job 9
    is unknown to the accounting."""
    _run(source.cluster, "7", account="physics", user="ann", start=T0 - 600, end=T0 + 300)
    _run(source.cluster, "7", account="chemistry", user="ben", start=T0 + 330, end=None)
    _run(source.cluster, "8", account="physics", user="cid", start=T0 + 600, end=None)
    _scrape(source, range(0, 1260, 10),
            lambda s: ("7",) if s < 600 else ("7", "8") if s < 900 else ("7", "8", "9"))
    result = range_import(source=source, start=at(T0), end=at(T0 + 1200))
    owners = {(p.window_start, p.job_id): (p.job_account, p.user)
              for p in ProcessRecord.objects.all()}
    assert owners[(at(T0 + 60), "7")] == ("physics", "ann")
    assert owners[(at(T0 + 360), "7")] == ("chemistry", "ben")
    assert owners[(at(T0 + 660), "8")] == ("physics", "cid")
    assert owners[(at(T0 + 960), "9")] == (None, None)
    assert result.unknown_jobs == 5
    source.refresh_from_db()
    assert source.observed["hpc_job"] and source.observed["unknown_jobs"] == 5


def test_the_fleet_page_says_what_the_source_cannot_carry(source, roles):
    _scrape(source, range(0, 180, 10), lambda s: ("9",))
    range_import(source=source, start=at(T0), end=at(T0 + 120))
    client = Client()
    client.force_login(roles.member)
    page = client.get(reverse("fleet")).content.decode()
    assert "No profiling fields" in page  # the no-profiling variant
    assert "named a Slurm job the accounting import does not know" in page
    assert "No ECC volatile counters" in page  # dcgm-exporter's default field set
    admin = Client()
    admin.force_login(roles.admin)
    limits = admin.get(reverse("api_telemetry_source", args=[source.pk])).json()["limits"]
    assert len(limits) == 3 and not any("One pod per GPU" in limit for limit in limits)


def test_a_pull_waits_for_the_accounting_import_a_bounded_time(source, time_machine):
    BackendConfig.objects.create(cluster=source.cluster)
    ImportCursor.objects.create(cluster=source.cluster, imported_until=at(T0 + 600))
    exporter = FakeExporter(state=lambda: [(Gpu(**{**GPU.__dict__, "hpc_job": "7"}),
                                            Reading(util=60))]).start()
    try:
        source.urls = exporter.url
        source.observed = {"hpc_job": True, "metrics": ["DCGM_FI_DEV_GPU_UTIL"]}
        source.cursor = at(T0)
        source.save()
        time_machine.move_to(at(T0 + 1200), tick=False)
        source_pull(source=source, now=at(T0 + 1200))
        source.refresh_from_db()
        assert source.cursor == at(T0 + 540)  # the accounting reached T0 + 600
        later = T0 + 600 + conf.SLURM_WAIT_S + 300
        time_machine.move_to(at(later), tick=False)
        source_pull(source=source, now=at(later))
        source.refresh_from_db()
        # windows older than TELEMETRY_SLURM_WAIT_S go on without the accounting
        assert source.cursor == at(T0 + 900 - 60)
    finally:
        exporter.stop()


def test_no_wait_where_no_slurm_backend_imports_the_accounting(source, time_machine):
    source.observed = {"hpc_job": True}
    source.cursor = at(T0)
    source.urls = "http://127.0.0.1:9/metrics"
    source.save()
    time_machine.move_to(at(T0 + 1200), tick=False)
    source_pull(source=source, now=at(T0 + 1200))
    source.refresh_from_db()
    assert source.cursor == at(T0 + 1140)
