"""Health from dcgm-exporter's fields (`gpuquota/telemetry/health.py`), through the
importer and the accounting's health rules, from stored scrapes (no Prometheus needed):
a GPU vanishing while its node's other GPUs report is lost and, back with a new reading,
recovered, its XID read at its return dated at its loss, across imports; a whole node
missing is no data and no event; row remaps and ECC counters of both field sets."""

from datetime import UTC, datetime

import pytest

from gpuquota.ingest.models import GpuEvent, Sample
from gpuquota.inventory.models import Gpu, GpuHealthInterval
from gpuquota.telemetry.exposition import exposition_parse
from gpuquota.telemetry.health import life_boot
from gpuquota.telemetry.importer import range_import
from gpuquota.telemetry.models import ScrapedReading, TelemetrySource
from gpuquota.usage.sweep import dirty_hours_process
from tests.telemetry.exporter import Gpu as ExporterGpu
from tests.telemetry.exporter import Reading, exposition

pytestmark = pytest.mark.django_db

T0 = 1_794_729_600  # 2026-11-15T08:00:00Z
A = ExporterGpu(uuid="GPU-0c000000-0000-4000-8000-000000000000", index=0, hostname="n1")
B = ExporterGpu(uuid="GPU-0c000000-0000-4000-8000-000000000001", index=1, hostname="n1")
C = ExporterGpu(uuid="GPU-0c000000-0000-4000-8000-000000000002", index=0, hostname="n2",
                fields="default")


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


@pytest.fixture(autouse=True)
def _an_hour_after(clock):
    """The scrapes are of 2026-11-15: the clock stands an hour after, so their hours are
    inside the raw data's retention whenever the suite runs."""
    clock.move_to(at(T0 + 3600))


@pytest.fixture
def source(cluster):
    return TelemetrySource.objects.create(name="direct", cluster=cluster, kind="exporter",
                                          urls="http://dcgm.example.org:9400/metrics",
                                          window_s=60, scrape_interval_s=10)


def scrape(source, seconds: range, state) -> None:
    """Store what the exporters printed every 10 s: `state(offset)` -> [(gpu, reading)]."""
    ScrapedReading.objects.bulk_create(
        ScrapedReading(source=source, url="http://dcgm.example.org:9400/metrics", at=T0 + s,
                       series=exposition_parse(exposition(state(s)), where="t"))
        for s in seconds if state(s))


def _import(source, start: int, end: int):
    return range_import(source=source, start=at(T0 + start), end=at(T0 + end))


def _events(gpu: ExporterGpu) -> list[tuple]:
    return list(GpuEvent.objects.filter(gpu__uuid=gpu.uuid).order_by("ts", "type")
                .values_list("type", "xid", "ts"))


def _health() -> list[tuple]:
    while dirty_hours_process():
        pass
    return list(GpuHealthInterval.objects.order_by("valid_from").values_list(
        "gpu__uuid", "state", "valid_from", "valid_until"))


def test_a_gpu_lost_while_its_node_reports_fails_and_its_return_recovers_it(source):
    """A falls off the bus 20 s into minute 10 (the exporter never printed its XID); B
    goes on; A is back at minute 30 + 40 s with XID 79, across two imports."""
    def state(s):
        a = Reading(util=50, xid=79 if s >= 1840 else 0)
        return [(A, a)] * (s < 620 or s >= 1840) + [(B, Reading(util=50))]

    scrape(source, range(0, 2400, 10), state)
    _import(source, 0, 1200)  # ends while A is lost
    _import(source, 1200, 2340)
    lost_at = T0 + 620  # the end of its last sample: its last reading + the scrape interval
    assert _events(A) == [("gpu_lost", None, at(lost_at)), ("xid", 79, at(lost_at))]
    assert _events(B) == []
    back = Sample.objects.filter(gpu__uuid=A.uuid, window_start__gte=at(T0 + 1800)).order_by(
        "window_start").first()
    assert back.window_start == at(T0 + 1840)  # 40 s into its window: its first reading
    assert back.boot.boot_id == life_boot(A.uuid, lost_at) != \
        GpuEvent.objects.get(gpu__uuid=A.uuid, type="gpu_lost").boot.boot_id
    assert _health() == [(A.uuid, "failed", at(lost_at), at(T0 + 1840))]
    last = Sample.objects.filter(gpu__uuid=A.uuid, window_start__lt=at(lost_at)).order_by(
        "-window_start").first()
    assert (last.window_start, last.window_end, last.readings) == (
        at(T0 + 600), at(lost_at), 2)


def test_a_whole_node_missing_is_no_data_and_no_event(source):
    def state(s):
        return [] if 600 <= s < 1200 else [(A, Reading(util=50)), (B, Reading(util=50))]

    scrape(source, range(0, 1800, 10), state)
    _import(source, 0, 1740)
    assert not GpuEvent.objects.exists()
    boots = set(Sample.objects.filter(gpu__uuid=A.uuid).values_list("boot__boot_id", flat=True))
    assert boots == {life_boot(A.uuid, None)}
    assert not Sample.objects.filter(window_start__gte=at(T0 + 600),
                                     window_start__lt=at(T0 + 1200)).exists()


def test_the_default_field_set_remaps_and_a_remap_failure(source):
    """dcgm-exporter's default fields: uncorrectable remapped rows and ROW_REMAP_FAILURE,
    no ECC volatile counters and no ROW_REMAP_PENDING."""
    def state(s):
        return [(C, Reading(util=50, unc_remapped=1 if s >= 300 else 0,
                            remap_failure=1 if s >= 900 else 0))]

    scrape(source, range(0, 1200, 10), state)
    _import(source, 0, 1140)
    assert _events(C) == [("remap_pending", None, at(T0 + 300)), ("xid", 64, at(T0 + 900))]
    assert [(state, start) for _, state, start, _ in _health()] == [
        ("degraded", at(T0 + 300)), ("failed", at(T0 + 900))]


def test_ecc_counters_and_xid_changes(source):
    def state(s):
        return [(A, Reading(util=50, dbe=1 if s >= 300 else 0, sbe=s // 60,
                            remap_pending=1 if s >= 600 else 0, xid=13 if s >= 420 else 0)),
                (B, Reading(util=50))]

    scrape(source, range(0, 900, 10), state)
    _import(source, 0, 840)
    assert _events(A) == [("ecc_uncorrected", None, at(T0 + 300)), ("xid", 13, at(T0 + 420)),
                          ("remap_pending", None, at(T0 + 600))]
    ecc = Sample.objects.get(gpu__uuid=A.uuid, window_start=at(T0 + 300))
    assert (ecc.ecc_uncorrected, ecc.ecc_corrected) == (1, 1)
    assert [(state, start) for _, state, start, _ in _health()] == [("failed", at(T0 + 300))]
    assert Gpu.objects.get(uuid=A.uuid).gpu_class is not None
