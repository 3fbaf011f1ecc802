"""The job pages and API against every role: a job's report, My jobs, the team's jobs and
the team page's link, the fleet's waste (admins), bad input as 4xx, the OpenAPI schema."""

from datetime import timedelta

import pytest

from gpuquota.jobs.models import Job
from gpuquota.jobs.services import jobs_refresh
from tests.helpers import assert_api_error, role_client
from tests.jobs.shapes import T0
from tests.jobs.world import JobWorld

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
NOW = T0 + timedelta(hours=3)
ROLES = ["admin", "lead", "other_lead", "member", "outsider", "anonymous"]


@pytest.fixture
def world(time_machine):
    time_machine.move_to(NOW, tick=False)
    world = JobWorld.build()
    world.slurm_job("101", utils=[[90] * 120] + [[0] * 120] * 3)
    world.slurm_job("102", utils=[[90] * 60], start=T0 + timedelta(minutes=5))
    jobs_refresh(now=NOW)
    world.job = Job.objects.get(job_id="101")
    return world


def test_job_page(world):
    for role in ROLES:
        response = role_client(world, role).get(f"/jobs/{world.job.pk}/")
        if role == "anonymous":
            assert response.status_code == 302
            continue
        if role in ("other_lead", "outsider"):
            assert response.status_code == 404, role
            continue
        html = response.content.decode()
        assert 'id="note-gpus_unused"' in html and "did not use 3 of the 4 GPUs" in html
        assert "24.00 USD at the on-demand rate" in html and "18.00 USD" in html
        assert html.count('class="chart"') == 4


def test_team_jobs_and_the_team_page_link(world):
    for role in ROLES:
        _team_jobs(world, role)


def _team_jobs(world, role):
    response = role_client(world, role).get("/teams/vision/jobs/")
    if role == "anonymous":
        assert response.status_code == 302
        return
    if role in ("other_lead", "outsider"):
        assert response.status_code == 404, role
        return
    html = response.content.decode()
    assert html.index('id="job-') == html.index(f'id="job-{world.job.pk}"')  # worst first
    assert 'id="team-users"' in html and "member" in html
    team_page = role_client(world, role).get("/teams/vision/").content.decode()
    assert 'href="/teams/vision/jobs/"' in team_page and 'id="team-jobs-line"' in team_page
    assert 'id="team-jobs-users"' in team_page  # its users ranked, most wasted first


def test_my_jobs_lists_the_owners_jobs_worst_first(world):
    html = role_client(world, "member").get("/jobs/").content.decode()
    first, second = html.index(f'id="job-{world.job.pk}"'), html.index('id="job-', html.index(
        f'id="job-{world.job.pk}"') + 5)
    assert first < second
    assert "<strong>9.0</strong> GPU-hours held, <strong>6.0</strong> wasted" in html
    assert 'href="/teams/vision/jobs/"' in html  # the team's jobs, from My jobs
    lead = role_client(world, "lead").get("/jobs/").content.decode()
    assert 'id="jobs-list"' not in lead  # the lead ran no job himself


def test_fleet_waste_is_for_admins(world):
    for role in ROLES:
        response = role_client(world, role).get("/manage/jobs/?month=2026-11")
        if role == "anonymous":
            assert response.status_code == 302
        elif role != "admin":
            assert response.status_code in (403, 404), role
        else:
            html = response.content.decode()
            assert 'id="waste-by-team"' in html and "gpus_unused" in html and "Vision" in html
            assert role_client(world, role).get("/manage/jobs/?month=nope").status_code == 400


def test_mail_opt_out_page(world):
    client = role_client(world, "member")
    assert "Stop these mails" in client.get("/jobs/mail/").content.decode()
    client.post("/jobs/mail/", {"mail": "off"})
    assert "Mail me again" in client.get("/jobs/mail/").content.decode()


def test_api_lists_and_reports(world):
    client = role_client(world, "member")
    rows = client.get("/api/v1/jobs?mine=true").json()["results"]
    assert [r["job_id"] for r in rows] == ["101", "102"]
    assert rows[0]["notes"][0]["code"] == "gpus_unused" and rows[0]["wasted_cost"] == "18.00"
    report = client.get(f"/api/v1/jobs/{world.job.pk}").json()
    assert report["wasted_gpu_s"] == 3 * 7200 and report["cost"] == "24.00"
    assert [g["util_avg_pct"] for g in report["gpus"]] == [90.0, 0.0, 0.0, 0.0]
    assert len(report["gpus"][0]["utilization"]) == 60
    assert_api_error(client.get("/api/v1/jobs?days=0"), 400, "days")
    assert_api_error(role_client(world, "outsider").get(f"/api/v1/jobs/{world.job.pk}"), 404)
    assert role_client(world, "outsider").get("/api/v1/jobs").json()["results"] == []
    assert_api_error(role_client(world, "outsider").get("/api/v1/jobs?team=vision"), 404)


def test_the_schema_documents_the_jobs_api(world):
    schema = role_client(world, "admin").get("/api/schema/?format=json").json()
    assert "/api/v1/jobs" in schema["paths"] and "/api/v1/jobs/{id}" in schema["paths"]
    assert "JobReport" in schema["components"]["schemas"]


def test_a_running_job_without_a_rate_card_reads_so(world):
    from gpuquota.rates.models import RateCard
    from gpuquota.schedulers.models import SlurmJob

    world.slurm_job("777", utils=[[60] * 30], start=NOW - timedelta(minutes=30))
    SlurmJob.objects.filter(job_id="777").update(ended_at=None, state="RUNNING")
    jobs_refresh(now=NOW)
    running = Job.objects.get(job_id="777")
    assert running.ended_at is None and running.reported_at is None
    RateCard.objects.all().delete()
    html = role_client(world, "member").get(f"/jobs/{running.pk}/").content.decode()
    assert "running: figures up to now" in html and "no rate card covers this job" in html
    assert role_client(world, "member").get(f"/api/v1/jobs/{running.pk}").json()["cost"] is None
