"""Each rule's false share where an admin or a script reads it: the backtest API's
`rules`, the review page's table, and `manage.py reclaim_backtest`."""

import re
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from gpuquota.core.timeutil import hour_floor
from reclaim.backtest import rules_backtest
from reclaim.conf import policy
from reclaim.models import Recommendation
from reclaim.services import recommendations_evaluate
from tests.reclaim.factories import World
from tests.reclaim.test_guarded import weekday_and_abandoned

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(clock):
    """Five weeks up to the suite's now, which the API and the page read too: the clock
    stands still (on 2026-12-07 at 11:00 the history began an hour after the page's now)."""
    world = World.create()
    weekday_and_abandoned(world, hour_floor(clock.now))
    return world


def test_a_gpu_kept_through_its_grace_can_be_recommended_again():
    """At 11:00 on a Monday the 14 days begin at 11:00 on a Monday: the weekday team's GPUs,
    idle over the 24 h before but busy since 09:00, are recommended and kept (busy during the
    grace). The replay took them for gone then, so the spec rule never took them on the
    weekend after, and its false share read 0 (CI on 2026-12-07)."""
    monday = datetime(2026, 12, 7, 11, tzinfo=UTC)
    world = World.create()
    weekday, _abandoned, _gone = weekday_and_abandoned(world, monday)
    spec = rules_backtest(policy=policy(), days=14, now=monday)["spec"]
    kept, taken = [r for r in spec.recommendations if r.reservation_id == weekday.id]
    assert kept.recommended_at == datetime(2026, 11, 23, 11, tzinfo=UTC)
    assert kept.skipped_gpu_ids == kept.gpu_ids and kept.false_gpu_ids == []
    assert taken.recommended_at.weekday() == 5 and taken.false_gpu_ids == taken.gpu_ids
    assert spec.false_reclaims == 2


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.calendar
def test_the_api_gives_each_rules_false_share(history):
    body = _client(history.admin).get("/api/v1/reclaim/backtest?days=14&rule=guarded").json()
    expected = rules_backtest(policy=policy(), days=14)
    assert body["policy"]["rule"] == "guarded"
    assert body["false_reclaims"] == 0 and body["recommendations"] == 1
    shares = {r["rule"]: r for r in body["rules"]}
    assert set(shares) == {"spec", "evidence", "guarded"}
    for rule, result in expected.items():
        assert shares[rule]["false_reclaims"] == result.false_reclaims
        assert shares[rule]["false_reclaim_rate"] == f"{result.false_reclaim_rate:.4f}"
        assert shares[rule]["gpus_released"] == result.gpus_released
    assert shares["spec"]["false_reclaims"] > 0


def test_the_api_refuses_an_unknown_rule(history):
    response = _client(history.admin).get("/api/v1/reclaim/backtest?days=14&rule=lucky")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "rule"


@pytest.mark.calendar
def test_the_review_page_shows_each_rules_false_share(history):
    page = _client(history.admin).get(reverse("reclaim_review") + "?days=14&rule=guarded")
    body = page.content.decode()
    expected = rules_backtest(policy=policy(), days=14)
    rows = dict(re.findall(r'<tr data-rule="(\w+)">.*?<td class="num[^"]*">([^<]*)</td></tr>',
                           body))
    assert set(rows) == {"spec", "evidence", "guarded"}
    assert rows["guarded"] == "0.0%" and rows["spec"] != "0.0%"
    assert "rule guarded" in body
    assert expected["guarded"].false_reclaims == 0
    bad = _client(history.admin).get(reverse("reclaim_review") + "?days=14&rule=lucky")
    assert bad.status_code == 200 and "Select a valid choice" in bad.content.decode()


def test_the_command_prints_one_line_per_rule(history):
    out = StringIO()
    call_command("reclaim_backtest", "--days", "14", stdout=out)
    lines = dict(re.findall(r"^RULE rule=(\w+) (.*)$", out.getvalue(), re.MULTILINE))
    assert set(lines) == {"spec", "evidence", "guarded"}
    assert "false_reclaims=0 false_share=0.0 " in lines["guarded"]
    assert "(in force)" in lines["guarded"]  # the default
    with pytest.raises(CommandError, match="--days"):
        call_command("reclaim_backtest", "--days", "0", stdout=StringIO())


def test_the_review_card_names_the_guard_that_kept_a_gpu(settings):
    """One GPU left empty, one serving at 3 %: the first is recommended, the card shows
    the second as kept and why."""
    from tests.reclaim.factories import DAY, GIB, NOW
    from tests.reclaim.test_guarded import assignments, stored

    settings.RECLAIM_RULE = "guarded"
    world = World.create()
    reservation = world.reserve(count=2, start=NOW - 8 * DAY, end=NOW + DAY)
    empty, serving = assignments(reservation)
    stored(empty, NOW - 8 * DAY, NOW)
    stored(serving, NOW - 8 * DAY, NOW, util=3, memory=20 * GIB, processes=60)
    recommendations_evaluate(now=NOW)
    [rec] = Recommendation.objects.filter(kind="reclaim")
    assert [g.id for g in rec.gpus.all()] == [empty.gpu_id]
    assert rec.evidence["gpus"][str(serving.gpu_id)]["guard"] == "serving"
    body = _client(world.admin).get(reverse("reclaim_review")).content.decode()
    assert "guarded: serving" in body
