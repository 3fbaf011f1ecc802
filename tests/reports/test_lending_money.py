"""Lending's money to the cent on hand-built months (accounting.md, Lending): during a loan
the busy seconds of the lent GPU are the borrowers' (`borrowed`, at the borrowed rate),
the reserving team is credited `reserved_rate x LENDING_CREDIT_SHARE` for every one of
them (`lending_credit`), failed seconds are neither, and every line has one rate.
Loans are written as rows, as the lending app stores them.

The month's card: reserved 2.50, on demand 3.00, borrowed 1.50 per GPU-hour; the credit's
rate is 2.50 x 0.5 = 1.25.
"""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import transaction

from gpuquota.core.timeutil import Period
from gpuquota.ingest.models import ProcessRecord
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.outbox.services import gpu_hours_mark_dirty, gpu_interval_mark_dirty
from gpuquota.reservations.models import Loan
from gpuquota.usage.sweep import dirty_hours_process
from reports.pricing import team_drafts
from tests.factories import EPOCH, GpuClassFactory, RateCardFactory, make_gpu
from tests.usage.factories import add_samples, reserve, team_with_user

pytestmark = pytest.mark.django_db
S, M, H = timedelta(seconds=1), timedelta(minutes=1), timedelta(hours=1)
DAY = datetime(2026, 10, 10, tzinfo=UTC)
OCTOBER, NOVEMBER = Period.month(2026, 10), Period.month(2026, 11)


class World:
    def __init__(self, cards=None):
        self.gpu_class = GpuClassFactory(name="H100-80GB")
        for card in cards or [{}]:
            RateCardFactory(gpu_class=self.gpu_class, **{
                "valid_from": EPOCH, "reserved_rate": Decimal("2.50"),
                "on_demand_rate": Decimal("3.00"), "borrowed_rate": Decimal("1.50"), **card})
        self.gpu = make_gpu(gpu_class=self.gpu_class)
        cluster = self.gpu.node.cluster
        self.vision, _ = team_with_user("vision", "alice", cluster)  # the lender
        self.speech, _ = team_with_user("speech", "bob", cluster)
        self.robotics, _ = team_with_user("robotics", "carol", cluster)
        self.pid = 100

    def reserve(self, start, end):
        self.assignment = reserve(self.vision, self.gpu, start, end)
        return self.assignment

    def lend(self, lent_from, returned_at=None, reason="owner_ask"):
        loan = Loan.objects.create(assignment=self.assignment, gpu=self.gpu,
                                   lent_from=lent_from, returned_at=returned_at,
                                   end_reason=reason if returned_at else "")
        gpu_interval_mark_dirty(gpu_ids=[self.gpu.id], start=lent_from,
                                end=returned_at or self.assignment.assigned_until)
        return loan

    def busy(self, start, minutes, *users, util=80):
        """Minute samples from `start`, each stored with a process per user (one batch)."""
        received = start + minutes * M
        add_samples(self.gpu, [{"start": start + i * M, "util": util, "received_at": received}
                               for i in range(minutes)])
        records = []
        for user in users:
            self.pid += 1
            records += [ProcessRecord(gpu=self.gpu, window_start=start + i * M,
                                      window_end=start + (i + 1) * M, pid=self.pid,
                                      pid_start=1, user=user, command="python",
                                      job_source="unix", received_at=received)
                        for i in range(minutes)]
        with transaction.atomic():
            ProcessRecord.objects.bulk_create(records)
            gpu_hours_mark_dirty(marks=[(self.gpu.id, start + i * M) for i in range(minutes)])

    def fail(self, start, end):
        GpuHealthInterval.objects.create(gpu=self.gpu, state="failed", valid_from=start,
                                         valid_until=end)
        gpu_interval_mark_dirty(gpu_ids=[self.gpu.id], start=start, end=end)

    def lines(self, period=OCTOBER):
        while dirty_hours_process():
            pass
        drafts = team_drafts(period=period, month=period.start.date())
        return {team.slug: sorted((line.kind, line.seconds, line.rate.normalize(), line.amount)
                                  for line in drafts[team.id].lines)
                for team in (self.vision, self.speech, self.robotics) if team.id in drafts}, drafts


def money(*values):
    return [Decimal(v) for v in values]


def test_a_loan_is_the_borrowers_busy_time_and_the_lenders_credit():
    world = World()
    world.reserve(DAY, DAY + 24 * H)
    world.lend(DAY + 2 * H, DAY + 4 * H)
    world.busy(DAY + H, 60, "alice")  # its own work before the loan
    world.busy(DAY + 2 * H, 120, "bob", "alice")  # a borrower; alice's process owns nothing
    lines, drafts = world.lines()
    assert lines["vision"] == [
        ("lending_credit", 7200, Decimal("1.25"), Decimal("-2.50")),
        ("reserved", 86400, Decimal("2.5"), Decimal("60.00")),
    ]
    assert lines["speech"] == [("borrowed", 7200, Decimal("1.5"), Decimal("3.00"))]
    assert drafts[world.vision.id].busy_s == 3600  # the borrowed seconds are not its own
    assert drafts[world.vision.id].covered_s == 3 * 3600  # but the loan's are covered


def test_a_loan_over_a_rate_change_splits_both_lines_at_the_change():
    change = DAY + 3 * H + 20 * M + 7 * S
    world = World(cards=[
        {"valid_until": change},
        {"valid_from": change, "reserved_rate": Decimal("3.1"), "borrowed_rate": Decimal("1.7")},
    ])
    world.reserve(DAY + 2 * H, DAY + 5 * H)
    world.lend(DAY + 2 * H + 13 * S, DAY + 4 * H + 29 * M + 31 * S)
    world.busy(DAY + 2 * H, 180, "bob")
    lines, _ = world.lines()
    # borrowed: [02:00:13, 03:20:07) = 4794 s, then [03:20:07, 04:29:31) = 4164 s
    assert lines["speech"] == [
        ("borrowed", 4164, Decimal("1.7"), Decimal("1.97")),  # 4164 x 1.7 / 3600 = 1.9663
        ("borrowed", 4794, Decimal("1.5"), Decimal("2.00")),  # 4794 x 1.5 / 3600 = 1.9975
    ]
    assert lines["vision"] == [
        ("lending_credit", 4164, Decimal("1.55"), Decimal("-1.79")),  # 1.7928
        ("lending_credit", 4794, Decimal("1.25"), Decimal("-1.66")),  # 1.6646
        ("reserved", 4807, Decimal("2.5"), Decimal("3.34")),  # 3.3382
        ("reserved", 5993, Decimal("3.1"), Decimal("5.16")),  # 5.1606
    ]


def test_a_loan_across_the_month_edge_is_billed_in_each_month():
    edge = datetime(2026, 11, 1, tzinfo=UTC)
    world = World()
    world.reserve(edge - 2 * H, edge + 2 * H)
    world.lend(edge - 30 * M - 11 * S, edge + 45 * M + 3 * S, reason="assignment_end")
    world.busy(edge - 2 * H, 240, "carol")
    october, _ = world.lines(OCTOBER)
    november, _ = world.lines(NOVEMBER)
    assert october["robotics"] == [("borrowed", 1811, Decimal("1.5"), Decimal("0.75"))]
    assert october["vision"] == [
        ("lending_credit", 1811, Decimal("1.25"), Decimal("-0.63")),  # 0.62882
        ("reserved", 7200, Decimal("2.5"), Decimal("5.00"))]
    assert november["robotics"] == [("borrowed", 2703, Decimal("1.5"), Decimal("1.13"))]
    assert november["vision"] == [
        ("lending_credit", 2703, Decimal("1.25"), Decimal("-0.94")),  # 0.93854
        ("reserved", 7200, Decimal("2.5"), Decimal("5.00"))]


def test_failed_seconds_of_a_lent_gpu_are_neither_borrowed_nor_credited():
    world = World()
    world.reserve(DAY, DAY + 6 * H)
    world.lend(DAY + 2 * H, DAY + 4 * H)
    world.busy(DAY + 2 * H, 120, "bob")
    world.fail(DAY + 3 * H, DAY + 3 * H + 20 * M)
    lines, _ = world.lines()
    assert lines["speech"] == [("borrowed", 6000, Decimal("1.5"), Decimal("2.50"))]
    assert lines["vision"] == [
        ("failure_credit", 1200, Decimal("2.5"), Decimal("-0.83")),
        ("lending_credit", 6000, Decimal("1.25"), Decimal("-2.08")),  # 2.0833
        ("reserved", 21600, Decimal("2.5"), Decimal("15.00")),
    ]


def test_an_owner_return_mid_hour_gives_the_rest_of_the_hour_back_to_the_owner():
    world = World()
    world.reserve(DAY, DAY + 6 * H)
    world.lend(DAY + 2 * H, DAY + 2 * H + 37 * M + 30 * S)
    world.busy(DAY + 2 * H, 40, "bob")  # preempted within the notice, at 02:40
    world.busy(DAY + 2 * H + 40 * M, 80, "alice")
    lines, drafts = world.lines()
    assert lines["speech"] == [("borrowed", 2250, Decimal("1.5"), Decimal("0.94"))]  # 0.9375
    assert lines["vision"] == [
        ("lending_credit", 2250, Decimal("1.25"), Decimal("-0.78")),  # 0.78125
        ("reserved", 21600, Decimal("2.5"), Decimal("15.00")),
    ]
    # bob's 150 s after the return ran on vision's GPU: vision's busy time, not billed apart
    assert drafts[world.vision.id].busy_s == 7200 - 2250


def test_borrowers_of_two_teams_share_each_second_of_one_lent_gpu():
    world = World()
    world.reserve(DAY, DAY + 6 * H)
    world.lend(DAY + 2 * H, DAY + 3 * H + 10 * M + 1 * S)
    world.busy(DAY + 2 * H, 30, "bob", "carol", "alice")  # the lender's own: no owner
    world.busy(DAY + 2 * H + 30 * M, 60, "carol")
    lines, _ = world.lines()
    # bob: 1800 / 2 = 900 s; carol: 900 s + 2401 s = 3301 s (of 4201 borrowed seconds)
    assert lines["speech"] == [("borrowed", 900, Decimal("1.5"), Decimal("0.38"))]  # 0.375
    assert lines["robotics"] == [("borrowed", 3301, Decimal("1.5"), Decimal("1.38"))]  # 1.37542
    assert lines["vision"] == [
        ("lending_credit", 4201, Decimal("1.25"), Decimal("-1.46")),  # 1.45868
        ("reserved", 21600, Decimal("2.5"), Decimal("15.00")),
    ]


def test_an_unattributed_borrower_pays_nothing_and_the_lender_is_still_credited():
    world = World()
    world.reserve(DAY, DAY + 6 * H)
    world.lend(DAY + 2 * H, None)  # still lent at the reservation's end
    world.busy(DAY + 2 * H, 30, "nobody")  # a user with no identity
    world.busy(DAY + 2 * H + 30 * M, 30)  # busy with no process at all
    world.busy(DAY + 3 * H, 17, "alice")  # only the lender's own process: unattributed
    lines, drafts = world.lines()
    assert "speech" not in lines and "robotics" not in lines
    assert lines["vision"] == [
        ("lending_credit", 4620, Decimal("1.25"), Decimal("-1.60")),  # 1.604166
        ("reserved", 21600, Decimal("2.5"), Decimal("15.00")),
    ]
    assert drafts[world.vision.id].busy_s == 0


def test_the_credit_share_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("GPUQUOTA_LENDING_CREDIT_SHARE", "0.3")
    world = World()
    world.reserve(DAY, DAY + 6 * H)
    world.lend(DAY + 2 * H, DAY + 3 * H)
    world.busy(DAY + 2 * H, 60, "bob")
    lines, _ = world.lines()
    assert lines["vision"][0] == ("lending_credit", 3600, Decimal("0.75"), Decimal("-0.75"))


@pytest.mark.parametrize("share", ["1.5", "-0.1", "0.12345", "half"])
def test_a_bad_credit_share_fails_loudly(monkeypatch, share):
    from django.core.exceptions import ImproperlyConfigured

    from reports import conf
    monkeypatch.setenv("GPUQUOTA_LENDING_CREDIT_SHARE", share)
    with pytest.raises(ImproperlyConfigured, match="GPUQUOTA_LENDING_CREDIT_SHARE"):
        conf.lending_credit_share()


def test_nothing_lent_nothing_borrowed():
    world = World()
    world.reserve(DAY, DAY + 2 * H)
    world.busy(DAY, 60, "bob")  # another team's work on vision's GPU: vision's busy time
    lines, drafts = world.lines()
    assert lines == {"vision": [("reserved", 7200, Decimal("2.5"), Decimal("5.00"))]}
    assert drafts[world.vision.id].busy_s == 3600


def test_the_lines_and_lent_hours_reach_every_place_they_are_shown(client):
    from tests.factories import AdminFactory

    world = World()
    world.reserve(DAY, DAY + 24 * H)
    world.lend(DAY + 2 * H, DAY + 4 * H)
    world.busy(DAY + 2 * H, 120, "bob")
    world.fail(DAY + 3 * H + 50 * M, DAY + 4 * H)  # 600 s failed: neither lent nor borrowed
    while dirty_hours_process():
        pass
    client.force_login(AdminFactory())
    export = client.get("/api/v1/statements/vision/2026-10").json()
    assert [(line["kind"], line["seconds"], line["rate"], line["amount"])
            for line in export["lines"]] == [
        ("reserved", 86400, "2.50", "60.00"), ("failure_credit", 600, "2.50", "-0.42"),
        ("lending_credit", 6600, "1.25", "-2.29")]  # 6600 x 1.25 / 3600 = 2.2917
    borrower = client.get("/api/v1/statements/speech/2026-10").json()
    assert [(line["kind"], line["amount"]) for line in borrower["lines"]] == [
        ("borrowed", "2.75")]
    csv = client.get("/api/v1/statements/vision/2026-10.csv").content.decode()
    assert '"lending_credit","H100-80GB","6600","1.83","1.25","-2.29"' in csv
    assert client.get("/api/v1/statements/vision/2026-10.pdf").content.startswith(b"%PDF")
    page = client.get("/statements/vision/2026-10/").content.decode()
    assert "Lending credit" in page and "Lent busy h" in page
    review = client.get("/statements/review/?month=2026-10").content.decode()
    usd = ' <span class="muted small">USD</span></td>'
    assert '<td class="num lending-credit">-2.29' + usd in review
    assert '<td class="num borrowed">2.75' + usd in review
    usage = client.get("/api/v1/usage/teams/vision",
                       {"start": "2026-10-10T00:00:00Z", "end": "2026-10-11T00:00:00Z"}).json()
    assert (usage["figures"]["lent_s"], usage["figures"]["lent_busy_s"]) == (6600, 6600)
    assert usage["figures"]["busy_s"] == 0
    assert [(r["figures"]["lent_s"], r["figures"]["lent_busy_s"])
            for r in usage["reservations"]] == [(6600, 6600)]


def test_the_team_page_shows_the_lent_hours(client):
    from tests.factories import AdminFactory

    world = World()
    world.reserve(DAY, DAY + 24 * H)
    world.lend(DAY + 2 * H, DAY + 4 * H + 30 * M)
    world.busy(DAY + 2 * H, 90, "bob")
    while dirty_hours_process():
        pass
    client.force_login(AdminFactory())
    page = client.get("/teams/vision/", {"month": "2026-10"}).content.decode()
    assert "Lent to other teams' preemptible work: 2.50 of these reserved hours" in page
    assert "kept busy 1.50 h" in page
    assert '<td class="num lent">2.50</td><td class="num lent-busy">1.50</td>' in page
