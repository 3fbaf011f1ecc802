"""The reliability API (admins only, the one error format, replay at `as_of`), the fleet
reliability page and its gauges on /metrics, and a browser pass through the menu."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from tests.factories import AdminFactory, UserFactory
from tests.helpers import assert_api_error, browser_login, screenshot
from tests.reliability.factories import fleet_build

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
LEMONS = "/api/v1/reliability/lemons"


@pytest.fixture
def fleet(db):
    with time_machine.travel(NOW, tick=False):
        yield fleet_build(as_of=NOW - timedelta(hours=1))


@pytest.fixture
def admin_client(client):
    client.force_login(AdminFactory())
    return client


def test_lemons_api_lists_the_lemon_with_evidence_and_replays(fleet, admin_client):
    body = admin_client.get(LEMONS).json()
    (flag,) = body["flagged"]
    assert flag["key"] == fleet["lemon"].uuid and flag["failures"] == 5
    assert flag["warnings"] == 1
    assert (flag["jobs_failed"], flag["jobs_expected"]) == (0, None)  # no job ran: not tested
    assert flag["evidence"][0].startswith("5 failures and 1 hardware warnings in 180 days")
    first = datetime.fromisoformat(flag["first_flagged"])
    before = (first - timedelta(seconds=1)).isoformat()
    assert admin_client.get(LEMONS, {"as_of": before}).json()["flagged"] == []
    nodes = admin_client.get(LEMONS, {"kind": "node"}).json()["flagged"]
    assert [n["key"] for n in nodes] == [f"{fleet['lemon'].node.cluster.slug}/n01"]


def test_figures_api_per_gpu_leaves_application_xids_out(fleet, admin_client):
    body = admin_client.get("/api/v1/reliability/figures", {"group": "gpu", "days": 30}).json()
    by_key = {row["key"]: row for row in body["figures"]}
    assert by_key[fleet["noisy"].uuid]["failures"] == 0
    assert by_key[fleet["lemon"].uuid]["failures"] == 2  # 30 and 70 days ago are outside
    assert body["days"] == 30 and len(by_key) == 20


@pytest.mark.parametrize("query, field", [
    ({"as_of": "2026-05-01T00:00:00"}, "as_of"), ({"as_of": "yesterday"}, "as_of"),
    ({"as_of": "2027-01-01T00:00:00Z"}, "as_of"), ({"kind": "rack"}, "kind"),
])
def test_bad_queries_are_400_naming_the_field(fleet, admin_client, query, field):
    assert_api_error(admin_client.get(LEMONS, query), 400, field)


def test_only_admins_see_it(fleet, client):
    assert_api_error(client.get(LEMONS), 401)  # anonymous: authenticate first
    client.force_login(UserFactory())
    assert client.get(LEMONS).status_code == 404
    assert client.get("/fleet/reliability/").status_code == 404


def test_the_schema_documents_the_api(db, client):
    paths = client.get("/api/schema/", {"format": "json"}).json()["paths"]
    lemons = paths[LEMONS]["get"]
    assert {p["name"] for p in lemons["parameters"]} >= {"as_of", "kind"}
    schema = str(client.get("/api/schema/", {"format": "json"}).json())
    assert "first_flagged" in schema and "jobs_expected" in schema


def test_page_and_metrics(fleet, admin_client, settings):
    settings.METRICS_ALLOWED_NETWORKS = "127.0.0.0/8"  # the test client's address
    page = admin_client.get("/fleet/reliability/").content.decode()
    assert fleet["lemon"].uuid in page and "xid 79 x5" in page
    assert "GPU has fallen off the bus" in page  # the taxonomy
    metrics = admin_client.get("/metrics").content.decode()
    assert 'gpuquota_gpu_failures_90d{gpu_class="H100-80GB"} 7.0' in metrics
    assert 'gpuquota_lemons_flagged{kind="gpu"} 1.0' in metrics


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_an_admin_finds_the_lemon_through_the_menu(browser_page):
    fleet = fleet_build(as_of=datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1))
    admin = AdminFactory(username="admin")
    admin.set_password("password")
    admin.save()
    page = browser_page
    browser_login(page, "admin")
    page.click("#nav-operations summary")
    page.click("#nav-operations >> text=Reliability")
    page.wait_for_url("**/fleet/reliability/")
    lemons = page.locator("#reliability-lemons").inner_text()
    assert "xid 79 x5" in lemons and "n01" in lemons
    assert "H100-80GB" in page.locator("#reliability-classes").inner_text()
    screenshot(page, "reliability-fleet")
    assert fleet["lemon"].uuid[:10] in page.content()
