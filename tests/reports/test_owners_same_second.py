"""Owners follow the covering sample whatever the arrival timing (issue 29 §2): a second
batch carrying a window already stored (an agent's resend under another batch id) stores
its new process records, but they own nothing, whether it arrives 1.1 s after the first
or in the same second. Sent through the agent endpoint at fixed instants, priced to the
cent through the statement API.

The card: H100-80GB on demand 3.6149, reserved 2.50, borrowed 1.50 per GPU-hour (the
lending credit's rate 2.50 x 0.5 = 1.25).
"""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.test import Client

from gpuquota.ingest.models import ProcessRecord, Sample
from gpuquota.reservations.models import Loan
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import AdminFactory, GpuClassFactory, RateCardFactory, make_gpu
from tests.helpers import run_concurrently
from tests.ingest.factories import Agent, batch, enrolled, gpu_entry, iso, process, sample
from tests.usage.factories import reserve, team_with_user

S = timedelta(seconds=1)
WINDOW = datetime(2026, 10, 12, 9, 0, tzinfo=UTC)  # [09:00, 09:05)
ARRIVAL = datetime(2026, 10, 12, 9, 5, 30, tzinfo=UTC)
AFTER_SETTLEMENT = datetime(2026, 11, 5, 12, 0, tzinfo=UTC)
MODEL = "NVIDIA H100-80GB"


class World:
    def __init__(self):
        h100 = GpuClassFactory(name="H100-80GB")
        RateCardFactory(gpu_class=h100, on_demand_rate=Decimal("3.6149"))
        issued = enrolled("gpu-node-07")
        self.agent = Agent(issued.key, Client())
        self.gpu = make_gpu(node=issued.node, gpu_class=h100)
        cluster = issued.node.cluster
        self.vision, _ = team_with_user("vision", "alice", cluster)
        self.nlp, _ = team_with_user("nlp", "bob", cluster)
        self.speech, _ = team_with_user("speech", "carol", cluster)

    def body(self, user: str, pid: int) -> dict:
        """The window [09:00, 09:05) busy, with one process of `user` (a new batch id)."""
        uuid = self.gpu.uuid
        return batch(gpus=[gpu_entry(uuid, name=MODEL)],
                     samples=[sample(uuid, WINDOW, length_s=300, util_gpu_avg=90.0)],
                     processes=[process(uuid, WINDOW, pid=pid, user=user, uid=None,
                                        window_end=iso(WINDOW + 300 * S),
                                        job={"source": "unix"})])

    def lend_to_the_fleet(self):
        """speech's reservation of the GPU for the day, lent from 08:00 to the end."""
        day = WINDOW.replace(hour=0)
        assignment = reserve(self.speech, self.gpu, day, day + timedelta(days=1),
                             approved_at=day)
        Loan.objects.create(assignment=assignment, gpu=self.gpu,
                            lent_from=day + timedelta(hours=8))

    def statement(self, team) -> list[tuple]:
        with time_machine.travel(AFTER_SETTLEMENT, tick=False):
            while dirty_hours_process():
                pass
            client = Client()
            client.force_login(AdminFactory())
            body = client.get(f"/api/v1/statements/{team.slug}/2026-10").json()
        return [(line["kind"], line["seconds"], line["rate"], line["amount"])
                for line in body["lines"]]


def _send_twice(world: World, gap_s: float) -> None:
    """alice's batch at 09:05:30, then the same window with bob's process `gap_s` later."""
    with time_machine.travel(ARRIVAL, tick=False):
        assert world.agent.post(world.body("alice", 1)).status_code == 202
    with time_machine.travel(ARRIVAL + timedelta(seconds=gap_s), tick=False):
        response = world.agent.post(world.body("bob", 2))
    assert response.status_code == 202
    assert response.json()["samples"] == {"stored": 0, "duplicates": 1, "conflicts": 0}
    assert response.json()["processes"]["stored"] == 1  # kept for the record
    assert Sample.objects.count() == 1 and ProcessRecord.objects.count() == 2


# 300 s x 3.6149 / 3600 = 0.3012; before: 150 s each (0.15 and 0.15) when in the same second
ON_DEMAND = [("on_demand", 300, "3.6149", "0.30")]


@pytest.mark.django_db
@pytest.mark.parametrize("gap_s", [0, 0.4, 1.1])
def test_a_resent_windows_processes_own_no_on_demand_time(gap_s):
    world = World()
    _send_twice(world, gap_s)
    assert world.statement(world.vision) == ON_DEMAND
    assert world.statement(world.nlp) == []


@pytest.mark.django_db
@pytest.mark.parametrize("gap_s", [0, 1.1])
def test_a_resent_windows_processes_borrow_nothing(gap_s):
    world = World()
    world.lend_to_the_fleet()
    _send_twice(world, gap_s)
    # 300 s x 1.50 / 3600 = 0.125; before, in the same second: 150 s each (0.06 and 0.06)
    assert world.statement(world.vision) == [("borrowed", 300, "1.50", "0.13")]
    assert world.statement(world.nlp) == []
    # -(300 s x 1.25 / 3600) = -0.1042; the reserved day is 24 h x 2.50
    assert world.statement(world.speech) == [("reserved", 86400, "2.50", "60.00"),
                                             ("lending_credit", 300, "1.25", "-0.10")]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_racing_resends_in_one_second_leave_the_first_stored_samples_owner():
    """Four batches with the same window and each its own process, sent at once in one
    second: whichever stored the sample owns the window, alone."""
    world = World()
    users = ["alice", "bob", "alice", "bob"]
    with time_machine.travel(ARRIVAL, tick=False):
        bodies = [world.body(user, pid) for pid, user in enumerate(users, start=1)]
        responses = run_concurrently([lambda b=b: Agent(world.agent.token, Client()).post(b)
                                      for b in bodies])
    stored = [r.json()["samples"]["stored"] for r in responses]
    assert sorted(stored) == [0, 0, 0, 1] and ProcessRecord.objects.count() == 4
    owner = world.vision if users[stored.index(1)] == "alice" else world.nlp
    other = world.nlp if owner == world.vision else world.vision
    assert world.statement(owner) == ON_DEMAND
    assert world.statement(other) == []
