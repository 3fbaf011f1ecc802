"""The demo's stand-in for a site's scheduler: lent GPUs are written with a borrower of
another team, and the simulated agent runs that borrower's busy process on them until the
GPU leaves the file."""

import json
from datetime import timedelta

import pytest

from agent.simulator import Simulator
from gpuquota.lending.demo import demo_borrowers_write
from gpuquota.lending.services import loan_lend, loan_return
from tests.lending.factories import BORROWER_USER, NOW, OWNER_USER, World

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def test_the_borrowers_file_names_a_user_of_another_team(tmp_path):
    world = World.create()
    reservation = world.reserve(count=1)
    loan = loan_lend(assignment=reservation.assignments.get(), at=NOW)
    path = tmp_path / "demo" / "borrowers.json"
    demo_borrowers_write(path=str(path), at=NOW)
    borrower = json.loads(path.read_text())[loan.gpu.uuid]
    assert borrower != OWNER_USER and borrower in (BORROWER_USER, "ada")
    loan_return(loan=loan, reason="owner_ask", at=NOW + timedelta(minutes=1))
    demo_borrowers_write(path=str(path), at=NOW)
    assert json.loads(path.read_text()) == {}


def test_the_simulated_agent_runs_the_borrower_while_listed(tmp_path):
    path = tmp_path / "borrowers.json"
    clock = [1_000_000.0]
    sim = Simulator(1, seed=0, hostname="n0", profiles=("idle",), clock=lambda: clock[0],
                    borrowers_file=str(path))
    [gpu] = sim.discover()
    assert sim.read(gpu).processes == [] and max(sim.read(gpu).util_gpu) == 0
    path.write_text(json.dumps({gpu.uuid: "sam"}))
    clock[0] += 10
    reading = sim.read(gpu)
    assert [p.owner.user for p in reading.processes] == ["sam"]
    assert min(reading.util_gpu) > 50
    path.write_text("{}")
    clock[0] += 10
    assert sim.read(gpu).processes == []
    path.write_text("not json")
    clock[0] += 10
    assert sim.read(gpu).processes == []
