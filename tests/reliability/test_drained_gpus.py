"""A drained GPU is kept from new assignments and loans until the drain ends, whatever
its health intervals say (a GPU whose failure needs a replacement may reboot cleanly and
still wait for it); its reservations move to a free GPU off the drained node, and the
team's leads are told, or stay where none is free (and are told so), tried again each
drain pass."""

import uuid

import pytest
import time_machine
from kombu.utils.json import loads

from gpuquota.core.errors import Conflict
from gpuquota.core.models import AuditEntry
from gpuquota.ingest.models import GpuEvent
from gpuquota.inventory.models import Cluster
from gpuquota.lending.scan import lending_scan
from gpuquota.lending.selectors import lend_candidates
from gpuquota.lending.services import loan_lend
from gpuquota.mail.models import MailDelivery
from gpuquota.mail.render import mail_render
from gpuquota.reliability.drains import drain_release, drains_apply
from gpuquota.reliability.models import Drain
from gpuquota.reliability.tasks import drains_task
from gpuquota.reservations.assigning import NoCapacity
from gpuquota.reservations.capacity import free_map
from gpuquota.reservations.models import Assignment, Loan
from gpuquota.reservations.services import reservation_create
from gpuquota.schedulers.models import BackendConfig
from tests.factories import NodeFactory, make_gpu
from tests.lending.factories import DAY, IDLE, MIN, NOW, World, held_gpus, samples
from tests.reliability.factories import scontrol_standin

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def world(settings):
    settings.LEND_AFTER_IDLE_S = int(IDLE.total_seconds())
    settings.LENDING_ENABLED = True
    return World.create(gpus=2)


def _fail(gpu, xid=64, at=NOW - 10 * MIN):
    GpuEvent.objects.create(event_id=uuid.uuid4(), node=gpu.node, gpu=gpu, ts=at, type="xid",
                            xid=xid, received_at=at)
    (drain,) = drains_apply(since=at, now=at + MIN)
    return drain


def test_a_drained_gpu_is_not_assigned_until_the_drain_ends(world):
    gpu = world.gpus[0]
    drain = _fail(gpu)  # xid 64: needs a replacement; no failed interval is open
    assert drain.needs == "replace" and drain.state == Drain.State.RECORDED
    fmap = free_map(gpu_class=world.gpu_class, start=NOW, end=NOW + DAY)
    assert [g.id for g in fmap.gpus_free_over(NOW, NOW + DAY)] == [world.gpus[1].id]
    with pytest.raises(NoCapacity):
        reservation_create(team=world.team, gpu_class=world.gpu_class, count=2, start=NOW,
                           end=NOW + DAY, requested_by=world.admin, now=NOW)
    drain_release(drain=drain, by=world.admin, fix="replaced", at=NOW)
    fmap = free_map(gpu_class=world.gpu_class, start=NOW, end=NOW + DAY)
    assert len(fmap.gpus_free_over(NOW, NOW + DAY)) == 2


def test_a_drained_gpu_is_never_lent_and_its_loan_returns(world):
    reservation = world.reserve(count=2)
    drained_gpu, other = held_gpus(reservation)
    for gpu in (drained_gpu, other):
        samples(gpu, start=NOW - IDLE, end=NOW)
    loan = loan_lend(assignment=reservation.assignments.get(gpu=drained_gpu), at=NOW - 5 * MIN)
    _fail(drained_gpu, at=NOW - 2 * MIN)  # xid 64, no failed interval: the drain alone
    lending_scan(now=NOW)
    loan.refresh_from_db()
    assert (loan.end_reason, loan.returned_at) == (Loan.EndReason.GPU_FAILED, NOW - 2 * MIN)
    open_loans = Loan.objects.filter(returned_at__isnull=True)
    assert [loan.gpu_id for loan in open_loans] == [other.id]  # the scan lent the idle other
    assert lend_candidates(now=NOW + IDLE) == []
    with pytest.raises(Conflict, match="drained"):
        loan_lend(assignment=reservation.assignments.get(gpu=drained_gpu), at=NOW + IDLE)


def test_reservations_move_off_the_drained_gpu_and_the_team_is_told(world):
    reservation = world.reserve(count=2)  # both GPUs of node 00
    spare_node = NodeFactory(cluster=world.cluster, hostname="h100-node-01")
    drained = held_gpus(reservation)[0]
    _fail(drained, xid=79, at=NOW)
    with time_machine.travel(NOW + MIN, tick=False):
        assert drains_task()["kept"] == 1  # nothing free: it stays, credited as failed time
        spare = make_gpu(node=spare_node, gpu_class=world.gpu_class, index=0,
                         at=NOW - 30 * DAY)
        assert drains_task()["moved"] == 1  # a GPU free since: tried again each pass
        assert drains_task()["moved"] == 0
    old = reservation.assignments.get(gpu=drained)
    new = reservation.assignments.get(gpu=spare)
    assert (old.assigned_until, old.end_reason) == (NOW + MIN, Assignment.EndReason.SWAPPED)
    assert (new.assigned_from, new.assigned_until) == (NOW + MIN, reservation.end)
    assert AuditEntry.objects.filter(action="reservation.swap", actor=None).count() == 1
    mails = MailDelivery.objects.filter(template="reservation_gpu_drained").order_by("pk")
    assert [m.recipient for m in mails] == [world.lead, world.lead]
    kept, moved = (mail_render(template=m.template, context=loads(m.context_json),
                               recipient=world.lead) for m in mails)
    assert "No free H100-80GB GPU" in kept.text and "xid 79" in kept.subject
    assert "replaced by h100-node-01/0" in moved.text


def test_a_drain_written_to_slurm_holds_and_moves_the_whole_node(settings, tmp_path):
    """Slurm drains nodes, not GPUs: once the drain is written, no job starts on the node's
    other GPUs either, so they are held out too and the reservations on them move."""
    settings.LENDING_ENABLED = True
    world = World.create(gpus=2, scheduler=Cluster.Scheduler.SLURM)
    BackendConfig.objects.create(cluster=world.cluster, mode=BackendConfig.Mode.WRITE,
                                 commands_dir=str(scontrol_standin(tmp_path)))
    reservation = world.reserve(count=2)  # both GPUs of node 00
    failed, sibling = held_gpus(reservation)
    spare_node = NodeFactory(cluster=world.cluster, hostname="h100-node-01")
    spares = [make_gpu(node=spare_node, gpu_class=world.gpu_class, index=i,
                       at=NOW - 30 * DAY) for i in range(2)]
    drain = _fail(failed, xid=79, at=NOW)
    assert drain.state == Drain.State.DRAINED  # written: scontrol State=DRAIN
    fmap = free_map(gpu_class=world.gpu_class, start=NOW + MIN, end=NOW + DAY)
    assert {g.id for g in fmap.gpus_free_over(NOW + MIN, NOW + DAY)} == {g.id for g in spares}
    with time_machine.travel(NOW + MIN, tick=False):
        assert drains_task()["moved"] == 2  # the sibling's assignment moves too
    ahead = reservation.assignments.filter(assigned_until__gt=NOW + MIN)
    assert {a.gpu_id for a in ahead} == {g.id for g in spares}
    assert reservation.assignments.get(gpu=sibling).end_reason == Assignment.EndReason.SWAPPED
    mail = MailDelivery.objects.get(template="reservation_gpu_drained")
    text = mail_render(template=mail.template, context=loads(mail.context_json),
                       recipient=world.lead).text
    assert "its node h100-node-00" in text and "Your GPUs there were replaced by" in text



def test_a_loan_on_another_gpu_of_a_drained_node_runs_on(settings, tmp_path):
    """Slurm's drain lets running jobs finish: the loan on the node's healthy GPU is not
    returned as failed, but nothing on the node is lent again."""
    settings.LEND_AFTER_IDLE_S = int(IDLE.total_seconds())
    settings.LENDING_ENABLED = True
    world = World.create(gpus=2, scheduler=Cluster.Scheduler.SLURM)
    BackendConfig.objects.create(cluster=world.cluster, mode=BackendConfig.Mode.WRITE,
                                 commands_dir=str(scontrol_standin(tmp_path)))
    reservation = world.reserve(count=2)
    failed, sibling = held_gpus(reservation)
    for gpu in (failed, sibling):
        samples(gpu, start=NOW - IDLE, end=NOW)
    loan = loan_lend(assignment=reservation.assignments.get(gpu=sibling), at=NOW - 5 * MIN)
    assert _fail(failed, xid=79, at=NOW - 2 * MIN).state == Drain.State.DRAINED
    lending_scan(now=NOW)
    loan.refresh_from_db()
    assert loan.returned_at is None  # not the failed GPU: its borrower's job runs on
    assert Loan.objects.filter(returned_at__isnull=True).count() == 1  # the failed one: none
    assert lend_candidates(now=NOW + IDLE) == []
