"""The sources page in a real browser: reached from the Operations menu, a source added
with the form (the secret typed into a password field and never shown again), its
failing pull shown, and the fleet page listing it with what its exporter variant cannot
carry; no script error, nothing the CSP blocks."""

import pytest

from gpuquota.telemetry.models import TelemetrySource
from tests.factories import AdminFactory, ClusterFactory
from tests.helpers import browser_login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SECRET = "bearer-secret-never-shown"


def test_an_admin_adds_a_source_and_sees_its_problem(browser_page):
    AdminFactory(username="admin")
    ClusterFactory(name="Kube A", slug="kube-a")
    page = browser_page
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    browser_login(page, "admin")
    page.click("#nav-operations summary")
    page.click("#nav-operations >> text=Telemetry sources")
    page.wait_for_url("**/telemetry/sources/")
    assert "active" in page.locator("#nav-operations").get_attribute("class")
    form = page.locator("#source-form")
    form.locator("[name=name]").fill("prom-a")
    form.locator("[name=cluster]").select_option(label="Kube A")
    form.locator("[name=kind]").select_option("prometheus")
    form.locator("[name=base_url]").fill("http://127.0.0.1:9")
    form.locator("[name=auth]").select_option("bearer")
    form.locator("[name=secret]").fill(SECRET)
    form.locator("button[type=submit]").click()
    page.wait_for_selector('#sources tr[data-source="prom-a"]')
    assert SECRET not in page.content()
    page.locator('#sources tr[data-source="prom-a"] >> text=Pull now').click()
    page.wait_for_selector('#sources tr[data-source="prom-a"] .badge.bad')
    assert "cannot connect" in page.locator("#sources").inner_text()
    screenshot(page, "telemetry-sources")
    # what an import showed of this exporter variant: Slurm jobs, no profiling fields,
    # the default field set
    TelemetrySource.objects.filter(name="prom-a").update(observed={
        "metrics": ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS",
                    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"],
        "hpc_job": True, "mig": True, "unknown_jobs": 3})
    page.goto("/fleet/")
    row = page.locator('#telemetry-sources tr[data-source="prom-a"]')
    assert row.is_visible()
    limits = row.locator(".source-limits").inner_text()
    assert "its MIG GPUs have no utilization (no data)" in limits
    assert "3 process record(s) named a Slurm job" in limits
    screenshot(page, "telemetry-fleet-limits")
    assert errors == []
