"""A loan changes who owns a GPU's busy seconds (the borrowers', never the reserving
team's), so lending and returning mark the hours already rolled up for recompute: the
figures and statements follow a loan without anyone recomputing by hand."""

from datetime import timedelta

import pytest
import time_machine

from gpuquota.lending.services import loan_lend, loan_return
from gpuquota.outbox.services import gpu_interval_mark_dirty
from gpuquota.reservations.models import Loan
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.sweep import dirty_hours_process
from tests.lending.factories import BORROWER_USER, NOW, World, held_gpus, samples

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
HOUR = timedelta(hours=1)


def _kinds(gpu, hour):
    return sorted((row.kind, row.team.slug if row.team else None, row.busy_s)
                  for row in GpuHourUsage.objects.filter(gpu=gpu, hour=hour)
                  .select_related("team"))


@time_machine.travel(NOW, tick=False)
def test_lending_and_returning_recompute_the_hours_already_rolled_up(settings):
    settings.LENDING_ENABLED = True
    world = World.create()
    gpu = held_gpus(world.reserve(count=1))[0]
    hour = NOW - 2 * HOUR
    samples(gpu, start=hour, end=hour + HOUR, util=90, users=(BORROWER_USER,))
    gpu_interval_mark_dirty(gpu_ids=[gpu.id], start=hour, end=hour + HOUR)
    dirty_hours_process()
    assert _kinds(gpu, hour) == [("reserved", "vision", 3600)]  # before: the owner's

    loan = loan_lend(assignment=gpu.assignments.get(), at=hour, reason="test")
    dirty_hours_process()
    assert _kinds(gpu, hour) == [("borrowed", "speech", 3600), ("reserved", "vision", 0)]

    loan_return(loan=loan, reason=Loan.EndReason.OWNER_ASK, at=hour + HOUR / 2)
    dirty_hours_process()
    assert _kinds(gpu, hour) == [("borrowed", "speech", 1800), ("reserved", "vision", 1800)]
