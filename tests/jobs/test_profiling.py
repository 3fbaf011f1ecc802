"""DCGM's profiling fields in a job's report (docs/jobs.md, "SM and tensor activity"): shown
per GPU and for the job where the samples carry them, "no profiling data" (never 0) where
not, and the `tensor_cores_unused` note on busy GPUs whose tensor pipes stayed still."""

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest

from gpuquota.jobs.analysis import GpuSeries, analyse
from tests.jobs.shapes import T0, facts, series


def profiled(key: str, utils: list[float], *, tensor: float | None, sm: float | None = 70,
             minutes_with: int | None = None) -> GpuSeries:
    s = series(key, utils)
    n = len(s.points) if minutes_with is None else minutes_with
    s.points = [replace(p, sm_active_pct=sm, sm_occupancy_pct=30, tensor_active_pct=tensor,
                        dram_active_pct=20) if i < n else p for i, p in enumerate(s.points)]
    return s


def notes(*gpus: GpuSeries) -> list[str]:
    minutes = len(gpus[0].points)
    return [n.code for n in analyse(facts=facts(minutes), gpus_held=len(gpus),
                                    series=list(gpus)).notes]


def test_busy_gpus_whose_tensor_pipes_stayed_still_get_the_note():
    assert notes(profiled("n/0", [90] * 60, tensor=0.2)) == ["tensor_cores_unused"]
    a = analyse(facts=facts(60), gpus_held=1, series=[profiled("n/0", [90] * 60, tensor=0.2)])
    [note] = a.notes
    assert note.severity == "advice" and note.wasted_gpu_s == 0 and "mixed precision" in (
        note.advice)
    assert "busy 90 %" in note.title and "0.2 %" in note.title


def test_no_note_with_tensor_work_low_use_or_too_little_profiling_data():
    assert notes(profiled("n/0", [90] * 60, tensor=25)) == []  # the tensor cores work
    assert "tensor_cores_unused" not in notes(profiled("n/0", [30] * 60, tensor=0))  # not busy
    assert notes(profiled("n/0", [90] * 60, tensor=0, minutes_with=20)) == []  # a third
    assert notes(series("n/0", [90] * 60)) == []  # no profiling data: no judgement


def test_no_profiling_data_is_none_never_zero():
    a = analyse(facts=facts(60), gpus_held=2,
                series=[profiled("n/0", [90] * 60, tensor=None, sm=None), series("n/1",
                                                                               [90] * 60)])
    # the first GPU carries occupancy and DRAM only: SM and tensor stay None
    assert a.gpus[0].profile.mean("tensor_active_pct") is None
    assert a.gpus[0].profile.mean("sm_occupancy_pct") == 30
    assert a.gpus[1].profile.empty
    plain = analyse(facts=facts(60), gpus_held=1, series=[series("n/0", [90] * 60)])
    assert plain.profile is None


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_report_page_api_and_text_show_them_or_say_no_profiling_data(settings):
    from django.core.management import call_command

    from gpuquota.ingest.models import Sample
    from gpuquota.jobs.models import Job
    from gpuquota.jobs.services import jobs_refresh
    from tests.helpers import role_client
    from tests.jobs.world import JobWorld

    world = JobWorld.build()
    world.slurm_job("701", utils=[[90] * 60, [90] * 60])
    world.slurm_job("702", utils=[[90] * 60], start=T0 + timedelta(hours=2))
    Sample.objects.filter(gpu=world.gpus[0], window_start__lt=T0 + timedelta(hours=1)).update(
        sm_active_avg=Decimal("64.5"), sm_occupancy_avg=Decimal("22"),
        tensor_active_avg=Decimal("0.3"), dram_active_avg=Decimal("18"))
    Sample.objects.filter(gpu=world.gpus[1], window_start__lt=T0 + timedelta(hours=1)).update(
        sm_active_avg=Decimal("60.5"), sm_occupancy_avg=Decimal("20"),
        tensor_active_avg=Decimal("0.1"), dram_active_avg=Decimal("16"))
    jobs_refresh(now=T0 + timedelta(hours=4))
    profiled_job, plain = Job.objects.get(job_id="701"), Job.objects.get(job_id="702")
    assert list(profiled_job.notes.values_list("code", flat=True)) == ["tensor_cores_unused"]

    client = role_client(world, "member")
    data = client.get(f"/api/v1/jobs/{profiled_job.pk}").json()
    assert data["profiling"] == {"sm_active_pct": 62.5, "sm_occupancy_pct": 21.0,
                                 "tensor_active_pct": 0.2, "dram_active_pct": 17.0}
    assert data["gpus"][0]["profiling"]["sm_active_pct"] == 64.5
    assert client.get(f"/api/v1/jobs/{plain.pk}").json()["profiling"] is None

    page = client.get(f"/jobs/{profiled_job.pk}/").content.decode()
    assert "SM active 62" in page and "tensor active 0" in page
    assert "no profiling data" in client.get(f"/jobs/{plain.pk}/").content.decode()

    out = StringIO()
    call_command("jobstats", "della", "701", stdout=out)
    assert "SM active        [" in out.getvalue() and "sm 64% tensor 0%" in out.getvalue()
    out = StringIO()
    call_command("jobstats", "della", "702", stdout=out)
    assert "SM/tensor        no profiling data" in out.getvalue()
    assert "tensor 0" not in out.getvalue()
