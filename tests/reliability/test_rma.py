"""RMA records: an admin sends a GPU back by its board serial; the GPU that takes the slot
(same node and index, a new UUID) is linked to it, and both GPUs' pages show the slot's
history."""

from datetime import UTC, datetime, timedelta

import pytest

from gpuquota.core.errors import DomainError, PermissionDenied
from gpuquota.core.models import AuditEntry
from gpuquota.reliability.models import Rma
from gpuquota.reliability.rma import rma_open, rmas_link_replacements
from tests.factories import AdminFactory, NodeFactory, UserFactory, make_gpu

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
DAY = timedelta(days=1)

pytestmark = pytest.mark.django_db


@pytest.fixture
def slot():
    node = NodeFactory(hostname="gpu-03")
    return {"old": make_gpu(node=node, index=2, at=NOW - 300 * DAY),
            "neighbour": make_gpu(node=node, index=3, at=NOW - 300 * DAY),
            "admin": AdminFactory()}


def test_only_an_admin_with_a_serial_records_an_rma(slot):
    with pytest.raises(PermissionDenied):
        rma_open(gpu=slot["old"], serial="1654321", reason="", by=UserFactory(), at=NOW)
    with pytest.raises(DomainError) as no_serial:
        rma_open(gpu=slot["old"], serial="  ", reason="", by=slot["admin"], at=NOW)
    assert no_serial.value.field == "serial"
    rma = rma_open(gpu=slot["old"], serial="1654321", reason="xid 64", by=slot["admin"],
                   at=NOW)
    assert (rma.node, rma.index, rma.replacement) == (slot["old"].node, 2, None)
    assert AuditEntry.objects.filter(action="gpu_rma").count() == 1
    with pytest.raises(DomainError, match="already open"):
        rma_open(gpu=slot["old"], serial="1654321", reason="", by=slot["admin"], at=NOW)


def test_the_new_uuid_in_the_same_slot_keeps_the_history(slot, client):
    old = slot["old"]
    rma_open(gpu=old, serial="1654321", reason="xid 64", by=slot["admin"], at=NOW)
    assert rmas_link_replacements() == []  # nothing in the slot yet
    old.retired_at = NOW + DAY
    old.save()
    new = make_gpu(node=old.node, index=2, at=NOW + 2 * DAY)  # the vendor's replacement
    (linked,) = rmas_link_replacements()
    assert (linked.replacement, linked.replaced_at) == (new, NOW + 2 * DAY)
    assert rmas_link_replacements() == []  # linked once
    client.force_login(slot["admin"])
    page = client.get(f"/fleet/gpus/{new.uuid}/").content.decode()
    assert 'data-rma="1654321"' in page and f"/fleet/gpus/{old.uuid}/" in page
    assert "(this GPU)" in page and "xid 64" in page
    neighbour = client.get(f"/fleet/gpus/{slot['neighbour'].uuid}/").content.decode()
    assert "No GPU of this slot was sent back" in neighbour


def test_the_gpu_page_form_records_it(slot, client):
    client.force_login(slot["admin"])
    url = f"/fleet/gpus/{slot['old'].uuid}/rma/"
    page = client.post(url, {"serial": "", "reason": "x"}, follow=True).content.decode()
    assert "Give the board serial" in page and not Rma.objects.exists()
    client.post(url, {"serial": "1654321", "reason": "xid 79 x5: a lemon"})
    assert Rma.objects.get().reason == "xid 79 x5: a lemon"
    client.force_login(UserFactory())
    assert client.post(url, {"serial": "1"}).status_code == 404  # admin pages do not advertise


def test_the_serial_the_agent_read_fills_the_record_and_a_mistyped_one_is_refused(slot):
    old = slot["old"]
    old.serial = "1654321"
    old.save(update_fields=["serial"])
    with pytest.raises(DomainError, match="reports the board serial 1654321") as typo:
        rma_open(gpu=old, serial="1654312", reason="", by=slot["admin"], at=NOW)
    assert typo.value.field == "serial"
    rma = rma_open(gpu=old, serial="", reason="xid 64", by=slot["admin"], at=NOW)
    assert rma.serial == "1654321"


def test_the_same_board_back_under_a_new_uuid_elsewhere_is_linked_by_its_serial(slot, client):
    old = slot["old"]
    rma_open(gpu=old, serial="1654321", reason="xid 64", by=slot["admin"], at=NOW)
    elsewhere = NodeFactory(hostname="gpu-09", cluster=old.node.cluster)
    stranger = make_gpu(node=elsewhere, index=0, at=NOW + DAY)  # another board: not linked
    assert rmas_link_replacements() == []
    back = make_gpu(node=elsewhere, index=1, at=NOW + 2 * DAY)
    back.serial = "1654321"  # repaired, reflashed: a new UUID, the same board
    back.save(update_fields=["serial"])
    make_gpu(node=old.node, index=2, at=NOW + 3 * DAY)  # the slot refilled later
    (linked,) = rmas_link_replacements()
    assert (linked.replacement, linked.replaced_at) == (back, NOW + 2 * DAY)
    entry = AuditEntry.objects.get(action="gpu_rma_replaced")
    assert entry.changes["matched_by"] == "serial"
    client.force_login(slot["admin"])
    page = client.get(f"/fleet/gpus/{back.uuid}/").content.decode()
    assert 'data-rma="1654321"' in page and f"/fleet/gpus/{old.uuid}/" in page
    assert "<code data-serial>1654321</code>" in page
    assert 'data-rma="1654321"' not in client.get(
        f"/fleet/gpus/{stranger.uuid}/").content.decode()


def test_gpus_without_a_serial_never_match_each_other(slot):
    """Consumer boards report none ("" stored): an RMA needs its typed serial, and an empty
    serial links nothing but by slot."""
    old = slot["old"]
    rma_open(gpu=old, serial="1654321", reason="xid 79", by=slot["admin"], at=NOW)
    make_gpu(node=NodeFactory(hostname="gpu-11"), index=2, at=NOW + DAY)  # serial ""
    assert rmas_link_replacements() == []
    new = make_gpu(node=old.node, index=2, at=NOW + 2 * DAY)
    (linked,) = rmas_link_replacements()
    assert linked.replacement == new
    assert AuditEntry.objects.get(action="gpu_rma_replaced").changes["matched_by"] == "slot"
