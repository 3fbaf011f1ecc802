"""Every change of a GPU's history goes through an audited service that marks what it
re-attributes, the Django admin included (issue 9, part 1)."""

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.models import AuditEntry
from gpuquota.ingest.health import gpu_health_interval_record
from gpuquota.inventory.history import gpu_class_change, gpu_node_change
from gpuquota.inventory.models import GpuClass, GpuHealthInterval, GpuModelMapping
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import AdminFactory, GpuClassFactory, NodeFactory, UserFactory, make_gpu
from tests.usage.factories import add_samples, minute_samples

pytestmark = pytest.mark.django_db
H, M = timedelta(hours=1), timedelta(minutes=1)


def _recent_hour() -> datetime:
    now = datetime.now(UTC)
    return now.replace(minute=0, second=0, microsecond=0) - 3 * H


def test_class_change_in_the_past_is_audited_and_recomputes_its_hours():
    start = _recent_hour()
    gpu = make_gpu()
    minute_samples(gpu, start, 120, util=50)
    dirty_hours_process()
    new = GpuClassFactory(name="H100-new")
    with pytest.raises(PermissionDenied):
        gpu_class_change(gpu=gpu, gpu_class=new, at=start + 30 * M, by=UserFactory())
    gpu_class_change(gpu=gpu, gpu_class=new, at=start + 30 * M, by=AdminFactory(),
                     reason="relabelled")
    assert set(DirtyGpuHour.objects.values_list("hour", flat=True)) == {start, start + H}
    dirty_hours_process()
    by_class = {}
    for row in GpuHourUsage.objects.filter(gpu=gpu):
        by_class[row.gpu_class.name] = by_class.get(row.gpu_class.name, 0) + row.busy_s
    assert by_class == {gpu.model_name.removeprefix("NVIDIA "): 1800, "H100-new": 5400}
    entry = AuditEntry.objects.get(action="gpu.class_change")
    assert entry.reason == "relabelled" and entry.changes["gpu_class"][1] == "H100-new"
    with pytest.raises(DomainError, match="after the current interval began"):
        gpu_class_change(gpu=gpu, gpu_class=GpuClassFactory(), at=start, by=AdminFactory())
    with pytest.raises(DomainError, match="future"):
        gpu_class_change(gpu=gpu, gpu_class=GpuClassFactory(),
                         at=datetime.now(UTC) + H, by=AdminFactory())


def test_node_change_is_audited_and_marks_the_hours_after():
    start = _recent_hour()
    gpu = make_gpu()
    minute_samples(gpu, start, 60)
    dirty_hours_process()
    target = NodeFactory()
    gpu_node_change(gpu=gpu, node=target, at=start + 10 * M, by=AdminFactory())
    gpu.refresh_from_db()
    assert gpu.node == target
    assert list(gpu.node_history.order_by("valid_from").values_list("node_id", "valid_until")
                ) == [(gpu.node_history.first().node_id, start + 10 * M), (target.id, None)]
    assert DirtyGpuHour.objects.filter(gpu=gpu, hour=start).exists()
    assert AuditEntry.objects.filter(action="gpu.node_change").exists()


def test_recording_a_failure_refuses_overlaps_and_ends_at_a_good_sample_of_another_boot():
    start = _recent_hour()
    gpu = make_gpu()
    add_samples(gpu, [{"start": start, "boot": "b1"}, {"start": start + 40 * M, "boot": "b2"}])
    dirty_hours_process()
    interval = gpu_health_interval_record(gpu=gpu, state="failed", valid_from=start + 5 * M,
                                          valid_until=None, by=AdminFactory(),
                                          reason="fan failure seen on site")
    assert (interval.valid_until, interval.boot_id) == (start + 40 * M, "b1")
    assert DirtyGpuHour.objects.filter(gpu=gpu, hour=start).exists()
    with pytest.raises(Conflict, match="Overlaps the failed interval"):
        gpu_health_interval_record(gpu=gpu, state="degraded", valid_from=start + 30 * M,
                                   valid_until=start + 50 * M, by=AdminFactory(), reason="")
    assert AuditEntry.objects.filter(action="gpu_health_record").count() == 1


def test_admin_interval_inlines_are_read_only(client):
    client.force_login(AdminFactory())
    gpu = make_gpu()
    page = client.get(reverse("admin:inventory_gpu_change", args=[gpu.pk]))
    assert page.status_code == 200
    assert b'name="class_history-0-valid_from"' not in page.content
    assert b'name="node_history-0-valid_from"' not in page.content
    assert b"Change class to" in page.content


def _gpu_form(**extra):
    data = {"index": 0, "pci_bus_id": "", "memory_total_bytes": "", "power_limit_w": "",
            "commissioned_at_0": "2026-01-01", "commissioned_at_1": "00:00:00",
            "retired_at_0": "", "retired_at_1": "", **extra}
    for prefix in ("node_history", "class_history", "health_history", "maintenance_blocks"):
        data.update({f"{prefix}-TOTAL_FORMS": 0, f"{prefix}-INITIAL_FORMS": 0})
    return data


def test_admin_class_change_goes_through_the_service(client):
    client.force_login(AdminFactory())
    gpu = make_gpu()
    new = GpuClassFactory(name="L40S")
    url = reverse("admin:inventory_gpu_change", args=[gpu.pk])
    data = _gpu_form(new_class=new.id, change_reason="relabel")
    response = client.post(url, data)
    assert response.status_code == 302, response.content[:2000]
    gpu.refresh_from_db()
    assert gpu.gpu_class == new
    assert AuditEntry.objects.filter(action="gpu.class_change").exists()
    refused = client.post(url, {**data, "new_class": new.id})
    assert refused.status_code == 200 and b"already of class L40S" in refused.content
    retired = client.post(url, {**data, "new_class": "", "retired_at_0": "2026-06-01",
                                "retired_at_1": "00:00:00", "change_reason": "scrapped"})
    assert retired.status_code == 302
    gpu.refresh_from_db()
    assert gpu.retired_at == datetime(2026, 6, 1, tzinfo=UTC)
    entry = AuditEntry.objects.get(action="gpu.service_change")
    assert entry.reason == "scrapped" and entry.changes["retired_at"][0] is None


def test_admin_health_interval_add_and_recover_go_through_services(client):
    admin = AdminFactory()
    client.force_login(admin)
    gpu = make_gpu()
    start = _recent_hour()
    add = client.post(reverse("admin:inventory_gpuhealthinterval_add"), {
        "gpu": gpu.id, "state": "failed", "valid_from_0": f"{start:%Y-%m-%d}",
        "valid_from_1": f"{start:%H:%M:%S}", "valid_until_0": "", "valid_until_1": "",
        "reason": "burnt", "closed_reason": ""})
    assert add.status_code == 302
    interval = GpuHealthInterval.objects.get(gpu=gpu)
    until = start + 20 * M
    change = client.post(reverse("admin:inventory_gpuhealthinterval_change",
                                 args=[interval.pk]),
                         {"valid_until_0": f"{until:%Y-%m-%d}",
                          "valid_until_1": f"{until:%H:%M:%S}",
                          "closed_reason": "replaced the card"})
    assert change.status_code == 302
    interval.refresh_from_db()
    assert interval.valid_until == until and interval.closed_by == admin
    assert set(AuditEntry.objects.values_list("action", flat=True)) >= {
        "gpu_health_record", "gpu_health_recover"}


def test_admin_mapping_deletion_is_audited_and_unmaps_the_gpus(client):
    client.force_login(AdminFactory())
    gpu = make_gpu()
    mapping = GpuModelMapping.objects.get(model_name=gpu.model_name)
    response = client.post(reverse("admin:inventory_gpumodelmapping_delete",
                                   args=[mapping.pk]), {"post": "yes"})
    assert response.status_code == 302
    gpu.refresh_from_db()
    assert gpu.gpu_class == GpuClass.objects.get(name=gpu.model_name)
    entry = AuditEntry.objects.get(action="gpu_model_mapping.delete")
    assert entry.changes["gpus_reclassified"] == [gpu.uuid]


@pytest.mark.browser
def test_admin_history_and_rate_card_pages_in_a_browser(transactional_db, browser_page):
    from tests.factories import RoleMatrix
    from tests.helpers import browser_login, screenshot

    RoleMatrix.create()
    gpu = make_gpu()
    klass = GpuClassFactory(name="H200")
    page = browser_page
    browser_login(page, "admin")
    page.goto(reverse("admin:inventory_gpu_change", args=[gpu.pk]))
    assert page.locator("text=Change of history (audited, recomputed)").count() == 1
    screenshot(page, "admin-gpu-history")
    page.goto(reverse("admin:rates_ratecard_add"))
    page.select_option("#id_gpu_class", str(klass.id))
    page.fill("#id_valid_from_0", "2026-10-31")
    page.fill("#id_valid_from_1", "22:00:00")
    page.fill("#id_reserved_rate", "2.50")
    page.fill("#id_on_demand_rate", "3.00")
    page.click("input[name=_save]")
    page.wait_for_load_state("networkidle")
    assert AuditEntry.objects.filter(action="rate_card.create").count() == 1
    page.goto(reverse("admin:rates_ratecard_add"))
    page.select_option("#id_gpu_class", str(klass.id))
    page.fill("#id_valid_from_0", "2026-10-30")
    page.fill("#id_valid_from_1", "00:00:00")
    page.fill("#id_valid_until_0", "2026-10-30")
    page.fill("#id_valid_until_1", "12:00:00")
    page.fill("#id_reserved_rate", "2.00")
    page.fill("#id_on_demand_rate", "3.00")
    page.click("input[name=_save]")
    page.wait_for_load_state("networkidle")
    assert page.locator("text=no H200 rate card from 2026-10-30 12:00:00Z").count() == 1
    screenshot(page, "admin-rate-card-gap-refused")
