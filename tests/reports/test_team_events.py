"""Every event a team should hear of reaches its channels through the one notification
outbox (docs/budgets.md, "Channels"): reservation requests and decisions, loans lent and
returned, the borrowers' digest, reclaim notices and objections, a drained GPU, a statement
sent; each once per channel whatever the retries, delivered to a real receiver on loopback
and signed per Standard Webhooks."""

from datetime import timedelta

import pytest

from gpuquota.lending.services import loan_lend, loan_return
from gpuquota.outbox.models import Notification
from gpuquota.reservations.notices import reservation_decision_notify
from gpuquota.reservations.services import reservation_approve, reservation_deny
from reclaim.notify import objection_upheld_notify, recommendation_notify
from reports.channels import channel_add, channels_send_due
from reports.models import Statement
from reports.sending import statement_send
from reports.services_statements import statement_approve
from tests.reclaim.factories import World, make_rec
from tests.reports.receiver import Receiver, standard_webhooks_verify
from tests.reservations.factories import NOW, Fleet
from tests.stmtdocs.factories import NOW as STATEMENTS_NOW
from tests.stmtdocs.factories import OCTOBER, draft, reserved_hours

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)


@pytest.fixture
def receiver(settings):
    settings.CHANNEL_ALLOWED_NETWORKS = "127.0.0.1/32"
    server = Receiver()
    yield server
    server.close()


def _events(team) -> list[str]:
    return list(Notification.objects.filter(target__in=[
        c.target for c in team.channels.all()]).order_by("id").values_list("event", flat=True))


def test_reservations_and_loans_reach_the_teams_channels_once(receiver, clock):
    clock.move_to(NOW)
    fleet = Fleet.create(vision_quota=1)
    hook, secret = channel_add(team=fleet.vision, kind="webhook", name="hook",
                               url=receiver.url + "/vision", by=fleet.vision_lead)
    channel_add(team=fleet.speech, kind="slack", name="slack", url=receiver.url + "/speech",
                by=fleet.speech_lead)
    active = fleet.request(count=1, start=NOW - H, end=NOW + 8 * H, by=fleet.admin)
    over = fleet.request(count=2)  # over quota: pending, then approved
    assert over.status == "pending"
    reservation_approve(reservation=over, actor=fleet.admin, now=NOW)
    reservation_decision_notify(over, decision="approved")  # a retry: nothing more
    denied = fleet.request(count=3, start=NOW + 5 * H, end=NOW + 6 * H)
    reservation_deny(reservation=denied, actor=fleet.admin, reason="the class is full",
                     now=NOW)
    loan = loan_lend(assignment=active.assignments.get(), reason="idle 2 h", at=NOW + H)
    loan_return(loan=loan, reason="owner_ask", at=NOW + 2 * H)
    loan_return(loan=loan, reason="owner_ask", at=NOW + 2 * H)  # returned already
    assert _events(fleet.vision) == [
        "reservation.pending", "reservation.approved", "reservation.pending",
        "reservation.denied", "loan.lent", "loan.returned"]
    assert _events(fleet.speech) == []  # another team's news stays with that team

    assert len(channels_send_due(now=NOW + 2 * H).sent) == 6
    bodies = receiver.json("/vision")
    assert [b["type"] for b in bodies] == _events(fleet.vision)
    denial = bodies[3]
    assert denial["data"]["reservation"] == denied.pk and "the class is full" not in str(
        denial["data"].get("gpu_class"))
    assert bodies[5]["data"]["reason"] == "owner_ask" and bodies[5]["data"]["gpu"] == (
        loan.gpu.uuid)
    for headers, body in receiver.to("/vision"):
        assert standard_webhooks_verify(secret=secret, headers=headers, body=body,
                                        now_s=int(headers["webhook-timestamp"]))


def test_reclaim_notices_and_statements_reach_the_teams_channels(receiver, clock):
    clock.move_to(STATEMENTS_NOW)
    world = World.create()
    channel_add(team=world.team, kind="teams", name="teams", url=receiver.url + "/teams",
                by=world.lead)
    rec = make_rec(world, status="accepted", accepted_at=STATEMENTS_NOW,
                   grace_until=STATEMENTS_NOW + H, objection_reason="")
    assert recommendation_notify(recommendation_id=rec.pk, event="accepted")
    rec.objection_decision_reason = "idle for a week"
    objection_upheld_notify(recommendation=rec)
    assert _events(world.team) == ["reclaim.accepted", "reclaim.upheld"]
    upheld = Notification.objects.get(event="reclaim.upheld")
    assert "idle for a week" in upheld.body  # the reason travels in the card

    reserved_hours(world.team, world.gpus[-1], OCTOBER.start + timedelta(days=3), 3,
                   reported_minutes=0)
    draft(OCTOBER)
    statement = statement_approve(statement=Statement.objects.get(team=world.team),
                                  by=world.admin, now=STATEMENTS_NOW)
    assert statement_send(statement=statement).complete
    statement_send(statement=statement)  # sent already: told once
    assert _events(world.team)[-1:] == ["statement.sent"]
    assert Notification.objects.filter(event="statement.sent").count() == 1
    assert len(channels_send_due(now=STATEMENTS_NOW).sent) == 3
    assert all(b["type"] == "message" for b in receiver.json("/teams"))
