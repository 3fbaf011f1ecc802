"""Pages, /metrics and the demo take what the apps built on them contribute
(`gpuquota.core.contributions`, `gpuquota.core.sections`), so a new app adds a section to
the team page or a gauge to /metrics without the page's app importing it."""

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from prometheus_client.core import GaugeMetricFamily

from gpuquota.core import contributions, sections
from gpuquota.core.contributions import contributed, contributions_check
from gpuquota.core.sections import Section, page_sections
from gpuquota.demo.management.commands import seed_demo
from gpuquota.usage import metrics


def _contributing(monkeypatch, *, alone=False, **kinds):
    """Make `contributed` answer these lists (per kind) after the installed apps' (only
    these, `alone`)."""
    real = contributed

    def fake(kind):
        return (*(() if alone else real(kind)), *kinds.get(kind, ()))

    for module in (contributions, sections, metrics, seed_demo):
        monkeypatch.setattr(module, "contributed", fake)
    return fake


def test_a_section_names_a_known_page_a_slot_of_it_and_arguments_it_passes():
    with pytest.raises(ValueError, match="no page 'teams'"):
        Section(page="teams", slot="main", template="x.html")
    with pytest.raises(ValueError, match="page 'team' has no slot 'footer'"):
        Section(page="team", slot="footer", template="x.html")

    def wants_period(*, team, period):
        return {}

    with pytest.raises(ValueError, match="page 'team' passes no period"):
        Section(page="team", slot="main", template="x.html", context=wants_period)
    def wants_period_only(*, period, user):
        return {}

    Section(page="utilization", slot="figures", template="x.html", context=wants_period_only)


def test_sections_come_in_order_a_shared_context_runs_once_and_none_shows_nothing(
        monkeypatch):
    calls = []

    def shared(*, team, now):
        calls.append((team, now))
        return {"figure": 7}

    def nothing(*, team):
        return None

    _contributing(monkeypatch, alone=True, PAGE_SECTIONS=[
        Section(page="team", slot="main", template="late.html", context=shared, order=90),
        Section(page="team", slot="top", template="banner.html", context=shared, order=5),
        Section(page="team", slot="main", template="hidden.html", context=nothing, order=1),
        Section(page="team", slot="main", template="early.html", order=2),
        Section(page="fleet", slot="figures", template="elsewhere.html"),
    ])
    filled = page_sections("team", team="T", user="U", can_act=True, month="M", now="N")
    found = {slot: [f.template for f in items] for slot, items in filled.items()}
    assert found == {"top": ["banner.html"], "main": ["early.html", "late.html"]}
    assert calls == [("T", "N")]
    late = next(f for f in filled["main"] if f.template == "late.html")
    assert late.context == {"team": "T", "user": "U", "can_act": True, "month": "M", "now": "N",
                            "figure": 7}
    with pytest.raises(TypeError, match="page 'team' takes"):
        page_sections("team", team="T", user="U", now="N")


def test_the_installed_apps_contribute_in_installed_apps_order():
    found = [(s.page, s.slot, s.template) for s in contributed("PAGE_SECTIONS")]
    assert found == [
        ("team", "main", "usage/_reservation_utilization.html"),
        ("team", "main", "schedulers/_team_holds.html"),
        ("team", "top", "schedulers/_team_foreign.html"),
        ("team", "main", "lending/_team_loans.html"),
        ("team", "main", "jobs/_team_jobs.html"),
        ("gpu", "main", "reliability/_unit_section.html"),
        ("node", "main", "reliability/_unit_section.html"),
        ("team", "main", "reports/_team_budget.html"),
        ("team", "main", "reports/_team_statements.html"),
        ("profile", "main", "reports/_profile_channels.html"),
        ("team", "top", "reclaim/_team_banner.html"),
        ("team", "main", "reclaim/_team_audit.html"),
        ("fleet", "figures", "reclaim/_fleet_figures.html"),
        ("fleet", "figures", "telemetry/_fleet_sources.html"),
    ]
    assert [type(c).__name__ for c in contributed("METRICS_COLLECTORS")] == [
        "LendingCollector", "ReliabilityCollector", "ReclaimCollector", "TelemetryCollector"]
    assert [seed.__module__ for seed in contributed("DEMO_SEEDS")] == ["gpuquota.lending.demo",
                                                                       "reports.demo"]
    assert contributions_check() == []
    with pytest.raises(ValueError, match="Unknown kind"):
        contributed("PAGE_SECTION")


class LentCollector:
    def collect(self):
        yield GaugeMetricFamily("gpuquota_test_lent_gpus", "GPUs lent now", value=3)


@pytest.mark.django_db
def test_a_new_app_adds_a_team_page_section_and_a_metrics_gauge(monkeypatch, settings,
                                                                 tmp_path, roles, client):
    (tmp_path / "lent.html").write_text(
        '<section id="lent">{{ team.name }} lends {{ lent }}{% if can_act %}'
        '<form method="post">{% csrf_token %}<button>Take back</button></form>{% endif %}'
        "</section>")
    settings.TEMPLATES = [{**settings.TEMPLATES[0],
                           "DIRS": [*settings.TEMPLATES[0]["DIRS"], tmp_path]}]

    def lent(*, team, user):
        return {"lent": "<b>2 GPUs</b>"} if user.is_authenticated else None

    _contributing(monkeypatch,
                  PAGE_SECTIONS=[Section(page="team", slot="main", template="lent.html",
                                         context=lent, order=30)],
                  METRICS_COLLECTORS=[LentCollector()])
    url = reverse("team_detail", args=[roles.team.slug])
    client.force_login(roles.lead)
    body = client.get(url).content.decode()
    section = body[body.index('<section id="lent">'):body.index("</section>")]
    assert "Vision lends &lt;b&gt;2 GPUs&lt;/b&gt;" in section  # escaped like any variable
    assert 'name="csrfmiddlewaretoken"' in section and "Take back" in section
    # in the "main" slot: after reclaim's history (20), before the statements (40)
    assert body.index('id="lent"') < body.index("<h2>Statements</h2>") < body.index(
        "<h2>Members</h2>")
    client.force_login(roles.member)
    assert "Take back" not in client.get(url).content.decode()

    settings.METRICS_TOKEN = "scrape"
    scrape = Client(HTTP_AUTHORIZATION="Bearer scrape").get("/metrics").content.decode()
    assert "gpuquota_test_lent_gpus 3.0" in scrape and "gpuquota_reclaimable_gpus" in scrape


@pytest.mark.django_db
def test_seed_demo_runs_the_contributed_seeds_after_the_demos_own(monkeypatch, capsys):
    seen = []

    def seed(*, now):
        from gpuquota.reservations.models import Reservation

        seen.append(Reservation.objects.filter(purpose__startswith="[demo] last month").count())
        return "Lending: 2 GPUs lent"

    _contributing(monkeypatch, DEMO_SEEDS=[seed])
    call_command("seed_demo", history_hours=0)
    out = capsys.readouterr().out
    assert seen and seen[0] > 0
    assert "Last month's statements (drafts, /statements/review/): " in out
    assert out.index("Last month's statements") < out.index("Lending: 2 GPUs lent")
