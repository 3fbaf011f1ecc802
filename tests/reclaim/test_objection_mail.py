"""An objection reaches people: the admins are mailed when a lead objects (the reason, the
GPUs, where to decide), and the team's leads when an admin decides, upheld (when the GPUs
go) or withdrawn (they stay). Through the mail outbox and the real SMTP server."""

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import Membership
from gpuquota.mail.models import MailDelivery
from reclaim.lifecycle import (
    recommendation_accept,
    recommendation_object,
    recommendation_uphold,
    recommendation_withdraw,
)
from tests.factories import AdminFactory, MembershipFactory, UserFactory
from tests.reclaim.factories import World, make_rec

pytestmark = pytest.mark.django_db


@pytest.fixture
def objected(smtp_server, django_capture_on_commit_callbacks):
    """An accepted recommendation of Vision that its lead objects to: two admins, two
    leads, one member."""
    world = World.create(gpus=4)
    second_admin = AdminFactory(username="admin2")
    second_lead = UserFactory(username="lead2")
    MembershipFactory(user=second_lead, team=world.team, role=Membership.Role.LEAD)
    rec = make_rec(world)
    now = timezone.now().replace(microsecond=0)
    with django_capture_on_commit_callbacks(execute=True):
        recommendation_accept(recommendation=rec, actor=world.admin, now=now)
    smtp_server.messages.clear()  # the acceptance notices
    with django_capture_on_commit_callbacks(execute=True):
        recommendation_object(recommendation=rec, actor=world.lead, now=now,
                              reason="the <b>eval</b> run starts tonight")
    return world, rec, now, second_admin, second_lead


def test_an_objection_tells_every_admin_what_and_where_to_decide(objected, smtp_server):
    world, rec, _now, second_admin, _second_lead = objected
    assert sorted(smtp_server.recipients()) == sorted([world.admin.email, second_admin.email])
    [message] = smtp_server.to(world.admin.email)
    subject = message.message["Subject"]
    assert subject.startswith("[gpuquota] Objection to decide: Vision wants to keep 1 GPU")
    text, html = message.text(), message.html()
    assert '"the <b>eval</b> run starts tonight"' in text  # text part: as typed
    assert "the &lt;b&gt;eval&lt;/b&gt; run" in html  # HTML part: escaped
    assert f"/reclaim/{rec.pk}/" in text and "/reclaim/#objected" in text
    assert "h100-node-00/" in text and "Nothing is released until an admin decides" in text
    assert not smtp_server.to(world.lead.email)
    assert MailDelivery.objects.filter(key=f"reclaim-{rec.pk}-objected").count() == 2


def test_an_upheld_objection_tells_the_leads_when_the_gpus_go(
        objected, smtp_server, django_capture_on_commit_callbacks):
    world, rec, now, _second_admin, second_lead = objected
    smtp_server.messages.clear()
    decided = now + timedelta(minutes=10)
    with django_capture_on_commit_callbacks(execute=True):
        recommendation_uphold(recommendation=rec, actor=world.admin, now=decided,
                              reason="no job since Tuesday")
    assert sorted(smtp_server.recipients()) == sorted([world.lead.email, second_lead.email])
    [message] = smtp_server.to(world.lead.email)
    rec.refresh_from_db()
    assert "Objection overruled" in message.message["Subject"]
    text = message.text()
    assert "over the objection of" in text and "no job since Tuesday" in text
    released = timezone.localtime(rec.grace_until, timezone.get_fixed_timezone(0))
    assert f"released at {released:%Y-%m-%d %H:%M}" in text
    assert world.member.email not in smtp_server.recipients()


def test_a_withdrawn_objection_tells_the_leads_the_gpus_stay(
        objected, smtp_server, django_capture_on_commit_callbacks):
    world, rec, now, _second_admin, second_lead = objected
    smtp_server.messages.clear()
    with django_capture_on_commit_callbacks(execute=True):
        recommendation_withdraw(recommendation=rec, actor=world.admin,
                                now=now + timedelta(minutes=5), reason="fair")
    assert sorted(smtp_server.recipients()) == sorted([world.lead.email, second_lead.email])
    [message] = smtp_server.to(world.lead.email)
    assert "Objection accepted" in message.message["Subject"]
    assert "Reason: fair" in message.text()
