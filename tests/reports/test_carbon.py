"""Facility energy and CO2e on statements (docs/accounting.md, Energy): PUE and intensity per
cluster with effective dates, an hourly series imported from a CSV, the idle-reserved energy,
the statement page, its PDF and the FOCUS columns; billed amounts unchanged.

October 2026, vision reserves one H100 (cluster "north") for 2 h from 01:00: 2 × 2.50 = 5.00.
- 01:00-02:00 busy (util 80), six 600 s windows of 360 kJ: 0.6 kWh;
- 02:00-03:00 idle (util 0), six windows of 180 kJ: 0.3 kWh (the idle-reserved energy).
north: PUE 1.250 and 400 g/kWh until 02:00, then PUE 1.500 and 400 g/kWh; the imported
series says 200 g/kWh for 01:00. Facility 0.6 × 1.25 + 0.3 × 1.5 = 1.200 kWh; CO2e
0.6 × 1.25 × 200 + 0.3 × 1.5 × 400 = 150 + 180 g = 0.330 kg, of which idle 0.180 kg.
speech runs on demand for an hour on cluster "south", which has no factor: 0.2 kWh, no CO2e."""

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pypdf
import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import Client

from gpuquota.core.models import AuditEntry
from gpuquota.ingest.models import ProcessRecord
from gpuquota.outbox.services import gpu_hours_mark_dirty
from gpuquota.rates.models import CarbonIntensityHour, ClusterEnergyFactor
from gpuquota.usage.sweep import dirty_hours_process
from reports.documents import statement_pdf_bytes
from reports.models import Statement
from reports.services_statements import statements_draft_month
from tests.factories import AdminFactory, ClusterFactory, NodeFactory, make_gpu
from tests.reports.factories import OCTOBER, h100
from tests.usage.factories import add_samples, reserve, team_with_user

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 5, tzinfo=UTC)
ONE = datetime(2026, 10, 1, 1, tzinfo=UTC)
H, M = timedelta(hours=1), timedelta(minutes=1)


def windows(gpu, start, util, joules):
    add_samples(gpu, [{"start": start + i * 10 * M, "seconds": 600, "util": util,
                       "energy_j": joules} for i in range(6)])


@pytest.fixture
def month(db, time_machine, tmp_path):
    time_machine.move_to(NOW, tick=False)
    gpu_class = h100(on_demand_rate=Decimal("3.00"))
    north = ClusterFactory(name="North", slug="north")
    south = ClusterFactory(name="South", slug="south")
    vision, _ = team_with_user("vision", "alice", north)
    speech, _ = team_with_user("speech", "bob", south)
    reserved = make_gpu(gpu_class=gpu_class, node=NodeFactory(cluster=north))
    spare = make_gpu(gpu_class=gpu_class, node=NodeFactory(cluster=south))
    reserve(vision, reserved, ONE, ONE + 2 * H)
    windows(reserved, ONE, 80, 360_000.0)
    windows(reserved, ONE + H, 0, 180_000.0)
    windows(spare, ONE, 80, 120_000.0)
    with transaction.atomic():
        ProcessRecord.objects.bulk_create([
            ProcessRecord(gpu=spare, window_start=ONE + i * 10 * M,
                          window_end=ONE + (i + 1) * 10 * M, pid=7, pid_start=1, user="bob",
                          command="python", job_source="unix", received_at=NOW)
            for i in range(6)])
        gpu_hours_mark_dirty(marks=[(spare.id, ONE)])
    while dirty_hours_process():
        pass
    ClusterEnergyFactor.objects.create(cluster=north, valid_from=OCTOBER.start,
                                       valid_until=ONE + H, pue=Decimal("1.25"),
                                       carbon_intensity=Decimal("400"), source="Grid 2025")
    ClusterEnergyFactor.objects.create(cluster=north, valid_from=ONE + H, pue=Decimal("1.5"),
                                       carbon_intensity=Decimal("400"), source="Grid 2025")
    series = tmp_path / "north.csv"
    series.write_text("Datetime (UTC),Carbon Intensity gCO₂eq/kWh (LCA)\n"
                      "2026-10-01T01:00:00Z,200\n")
    out = io.StringIO()
    call_command("carbon_intensity_import", "north", str(series), "--source", "Maps", stdout=out)
    assert out.getvalue().startswith("1 hours")
    statements_draft_month(period=OCTOBER, now=NOW)
    return {"admin": AdminFactory(), "vision": vision}


def lines_of(slug):
    statement = Statement.objects.get(team_slug=slug, month=OCTOBER.start)
    return statement, {line.kind: line for line in statement.lines.all()}


def test_lines_carry_facility_energy_and_co2e_hour_by_hour(month):
    statement, lines = lines_of("vision")
    reserved = lines["reserved"]
    assert (statement.total, reserved.amount) == (Decimal("5.00"), Decimal("5.00"))
    assert (reserved.energy_kwh, reserved.facility_energy_kwh, reserved.co2e_kg,
            reserved.idle_energy_kwh, reserved.idle_co2e_kg) == (
        Decimal("0.900"), Decimal("1.200"), Decimal("0.330"), Decimal("0.300"),
        Decimal("0.180"))
    [north] = statement.energy_basis
    assert [f["pue"] for f in north["factors"]] == ["1.250", "1.500"]
    assert north["hourly"] == [{"source": "Maps", "hours": 1}]
    speech, lines = lines_of("speech")
    on_demand = lines["on_demand"]
    assert (on_demand.amount, on_demand.energy_kwh) == (Decimal("3.00"), Decimal("0.200"))
    assert (on_demand.facility_energy_kwh, on_demand.co2e_kg) == (None, None)  # no factor
    assert speech.energy_basis == [{"cluster": "South", "factors": [], "hourly": [],
                                    "missing_hours": 1}]


def test_page_pdf_and_focus_show_them(month):
    client = Client()
    client.force_login(month["admin"])
    page = client.get("/statements/vision/2026-10/").content.decode()
    assert 'id="co2e-total">0.330' in page and 'id="facility-total">1.200' in page
    assert 'id="idle-reserved"' in page
    assert ("PUE 1.250, 400.00 g CO2e/kWh (Grid 2025) from 2026-10-01 until 2026-10-01 "
            "02:00 UTC") in page
    assert "hourly intensity for 1 h (Maps)" in page
    statement = Statement.objects.get(team_slug="vision", month=OCTOBER.start)
    pdf = statement_pdf_bytes(statement=statement, now=NOW)
    text = " ".join(p.extract_text() for p in pypdf.PdfReader(io.BytesIO(pdf)).pages)
    text = " ".join(text.split())
    assert "Energy and carbon" in text and "Idle reserved" in text and "0.330" in text
    assert "PUE 1.500, 400.00 g CO2e/kWh (Grid 2025) from 2026-10-01 02:00 UTC" in text
    rows = list(csv.DictReader(io.StringIO(
        client.get("/api/v1/focus/2026-10.csv").content.decode())))
    by_team = {(r["SubAccountId"], r["x_ChargeKind"]): r for r in rows}
    reserved = by_team[("vision", "reserved")]
    assert (reserved["x_EnergyKWh"], reserved["x_FacilityEnergyKWh"], reserved["x_CarbonKgCO2e"],
            reserved["x_IdleReservedEnergyKWh"], reserved["x_IdleReservedCarbonKgCO2e"],
            reserved["BilledCost"]) == ("0.900", "1.200", "0.330", "0.300", "0.180", "5.00")
    assert by_team[("speech", "on_demand")]["x_CarbonKgCO2e"] == ""


def test_the_import_refuses_a_bad_file_naming_the_line(month, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("datetime,carbon_intensity\n2026-10-01T03:00:00Z,10\n2026-10-01T04:30:00Z,5\n")
    with pytest.raises(CommandError, match="Line 3: .* not the start of an hour"):
        call_command("carbon_intensity_import", "north", str(bad), "--source", "x")
    bad.write_text("datetime,carbon_intensity\n2026-10-01T03:00:00+00:00,-1\n")
    with pytest.raises(CommandError, match="Line 2"):
        call_command("carbon_intensity_import", "north", str(bad), "--source", "x")
    with pytest.raises(CommandError, match="No cluster"):
        call_command("carbon_intensity_import", "nowhere", str(bad), "--source", "x")
    assert CarbonIntensityHour.objects.count() == 1  # nothing of a refused file was kept
    client = Client()
    client.force_login(month["admin"])
    assert client.get("/admin/rates/clusterenergyfactor/").status_code == 200
    assert client.get("/admin/rates/clusterenergyfactor/add/").status_code == 200
    south = ClusterFactory(slug="south")
    form = {"cluster": south.pk, "valid_from_0": "2026-10-01", "valid_from_1": "00:00:00",
            "pue": "1.1", "carbon_intensity": "90", "source": "South grid"}
    response = client.post("/admin/rates/clusterenergyfactor/add/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert AuditEntry.objects.filter(action="energy_factor.save").count() == 1
    # overlapping the first: refused by the form, naming the rule
    response = client.post("/admin/rates/clusterenergyfactor/add/",
                           {**form, "valid_from_0": "2026-10-02"})
    assert response.status_code == 200 and "cannot overlap" in response.content.decode()


def test_one_factor_per_cluster_over_the_month_reads_no_hours(month):
    """One factor covering the month on every cluster and no hourly figure: the sums are
    read per cluster, not per hour, with the same rules."""
    CarbonIntensityHour.objects.all().delete()
    ClusterEnergyFactor.objects.filter(pue=Decimal("1.5")).delete()
    ClusterEnergyFactor.objects.filter(pue=Decimal("1.25")).update(valid_until=None)
    statements_draft_month(period=OCTOBER, now=NOW)
    speech, _ = lines_of("speech")  # south has no factor all month: its hours not counted
    assert speech.energy_basis[0]["missing_hours"] is None
    ClusterEnergyFactor.objects.create(cluster=ClusterFactory(slug="south"),
                                       valid_from=OCTOBER.start, pue=Decimal("1.1"),
                                       carbon_intensity=Decimal("100"), source="South grid")
    statements_draft_month(period=OCTOBER, now=NOW)
    statement, lines = lines_of("vision")
    reserved = lines["reserved"]
    assert (reserved.facility_energy_kwh, reserved.co2e_kg, reserved.idle_co2e_kg) == (
        Decimal("1.125"), Decimal("0.450"), Decimal("0.150"))
    assert statement.energy_basis[0]["hourly"] == []
    _, lines = lines_of("speech")
    assert (lines["on_demand"].facility_energy_kwh, lines["on_demand"].co2e_kg) == (
        Decimal("0.220"), Decimal("0.022"))


def test_a_gpu_moved_to_another_cluster_counts_where_it_was(month):
    """speech's GPU moves to north a day after its hour on south: that hour stays south's
    (no factor), though the GPU's node is now on north."""
    from gpuquota.inventory.history import gpu_node_change
    from gpuquota.inventory.models import Gpu

    spare = Gpu.objects.get(node__cluster__slug="south")
    gpu_node_change(gpu=spare, node=NodeFactory(cluster=ClusterFactory(slug="north")),
                    at=ONE + 24 * H, by=month["admin"])
    while dirty_hours_process():
        pass
    statements_draft_month(period=OCTOBER, now=NOW)
    speech, lines = lines_of("speech")
    assert (lines["on_demand"].energy_kwh, lines["on_demand"].co2e_kg) == (Decimal("0.200"),
                                                                           None)
    assert speech.energy_basis[0]["cluster"] == "South"


def test_the_csv_and_the_mail_carry_kwh_co2e_and_the_basis(month, smtp_server):
    from accounts.models import Membership
    from reports.export import SPEC_COLUMNS, statement_csv
    from reports.sending import statement_send
    from reports.services_statements import statement_approve

    statement, _ = lines_of("vision")
    statement = statement_approve(statement=statement, by=month["admin"], now=NOW)
    rows = list(csv.DictReader(io.StringIO(statement_csv(statement))))
    assert list(rows[0])[:len(SPEC_COLUMNS)] == SPEC_COLUMNS  # the spec's columns first
    [reserved] = [row for row in rows if row["kind"] == "reserved"]
    assert (reserved["amount"], reserved["energy_kwh"], reserved["facility_energy_kwh"],
            reserved["co2e_kg"], reserved["idle_energy_kwh"], reserved["idle_co2e_kg"]) == (
        "5.00", "0.900", "1.200", "0.330", "0.300", "0.180")
    assert reserved["energy_basis"].startswith(
        "North: PUE 1.250, 400.00 g CO2e/kWh (Grid 2025) from 2026-10-01 until")
    assert "hourly intensity for 1 h (Maps)" in reserved["energy_basis"]
    speech, _ = lines_of("speech")
    [on_demand] = csv.DictReader(io.StringIO(statement_csv(speech)))
    assert (on_demand["energy_kwh"], on_demand["co2e_kg"]) == ("0.200", "")  # no factor
    assert on_demand["energy_basis"] == "South: 1 h without a PUE and intensity (no CO2e)"

    Membership.objects.filter(team=month["vision"]).update(role=Membership.Role.LEAD)
    assert statement_send(statement=statement).complete
    [message] = smtp_server.messages
    text = message.text()
    assert "- Reserved H100-80GB: 0.900 kWh IT, 1.200 kWh facility, 0.330 kg CO2e" in text
    assert ("- Idle reserved (part of the reserved energy above): 0.300 kWh IT, "
            "0.180 kg CO2e") in text
    assert "Total: 0.900 kWh IT, 1.200 kWh facility, 0.330 kg CO2e" in text
    assert "PUE and carbon intensity: North: PUE 1.250, 400.00 g CO2e/kWh (Grid 2025)" in text
    assert "0.330 kg CO2e" in message.html()
