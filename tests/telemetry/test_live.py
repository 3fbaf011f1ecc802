"""Live pulls: Debian's Prometheus scraping a fake dcgm-exporter every second, and the
same exporter scraped directly; a dead exporter is no data, never idle; hostile text is
refused whole."""

import time
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from gpuquota.ingest.models import Sample
from gpuquota.telemetry.models import ScrapedReading, TelemetrySource
from gpuquota.telemetry.services import source_pull
from tests.telemetry.exporter import FakeExporter, Gpu, Reading

pytestmark = [pytest.mark.prometheus, pytest.mark.django_db]

GPU = Gpu(uuid="GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", hostname="gpu-node-07",
          pod=("vision", "train-0", "pytorch"))
WINDOW_S = 5


UTIL = 42.0  # constant: a scrape on a window's edge may be stamped either side of it


@pytest.fixture
def exporter():
    server = FakeExporter(state=lambda: [(GPU, Reading(util=UTIL))]).start()
    yield server
    server.stop()


def _now() -> datetime:
    return timezone.now().replace(microsecond=0)


def _wait_for_window_boundary() -> None:
    time.sleep(WINDOW_S - time.time() % WINDOW_S + 0.2)


def test_prometheus_scraping_an_exporter_every_second(prometheus_with, exporter, cluster):
    server = prometheus_with(targets=[exporter.target], scrape_interval_s=1)
    source = TelemetrySource.objects.create(
        name="live", cluster=cluster, kind="prometheus", base_url=server.url,
        window_s=WINDOW_S, scrape_interval_s=1, delay_s=2, cursor=None)
    _wait_for_window_boundary()
    source.cursor = datetime.fromtimestamp(int(time.time()) // WINDOW_S * WINDOW_S, UTC)
    source.save()
    time.sleep(4 * WINDOW_S + 2.5)  # a window is imported once the one after it has closed
    result = source_pull(source=source, now=_now())
    assert result is not None and result.counts["samples"]["stored"] >= 2
    samples = list(Sample.objects.order_by("window_start"))
    assert max(s.readings for s in samples) >= 4  # a scrape a second
    assert all(s.readings <= 6 and float(s.util_gpu_avg) == UTIL for s in samples)

    exporter.status = 500  # the exporter breaks: Prometheus has no readings
    broken_from = time.time()
    time.sleep(3 * WINDOW_S)
    exporter.status = 200
    time.sleep(3 * WINDOW_S + 3)
    source.refresh_from_db()
    source_pull(source=source, now=_now())
    whole_gap = [s for s in Sample.objects.all()
                 if s.window_start.timestamp() >= broken_from + 1
                 and s.window_end.timestamp() <= broken_from + 3 * WINDOW_S - 1]
    assert whole_gap == []  # no data, not zeros
    assert Sample.objects.filter(window_start__gt=datetime.fromtimestamp(
        broken_from + 3 * WINDOW_S, UTC)).exists()  # and back afterwards


def test_exporters_scraped_directly(exporter, cluster):
    source = TelemetrySource.objects.create(
        name="direct", cluster=cluster, kind="exporter", urls=exporter.url + "\n",
        window_s=WINDOW_S, interval_s=1, scrape_interval_s=1)
    _wait_for_window_boundary()
    source.cursor = datetime.fromtimestamp(int(time.time()) // WINDOW_S * WINDOW_S, UTC)
    source.save()
    deadline = time.time() + 3 * WINDOW_S + 0.5  # a window is imported once the next closed
    while time.time() < deadline:
        source_pull(source=source, now=_now())
        source.refresh_from_db()
        time.sleep(0.5)
    assert source.last_error == ""
    samples = list(Sample.objects.order_by("window_start"))
    assert len(samples) == 2
    assert max(s.readings for s in samples) >= 6  # a scrape every half second or so
    assert all(float(s.util_gpu_avg) == UTIL for s in samples)
    # Readings of imported windows are dropped, but for the window before the cursor.
    assert ScrapedReading.objects.filter(at__lt=source.cursor.timestamp() - WINDOW_S).count() == 0


def test_hostile_exporter_text_is_refused_whole(exporter, cluster):
    source = TelemetrySource.objects.create(
        name="hostile", cluster=cluster, kind="exporter", urls=exporter.url,
        window_s=WINDOW_S)
    huge = Gpu(uuid=GPU.uuid, pod=("vision", "x" * 5000, "c"))
    exporter.state = lambda: [(GPU, Reading(util=50)), (huge, Reading(util=50))]
    source_pull(source=source, now=_now())
    source.refresh_from_db()
    assert "over 1024 characters" in source.last_error and source.failures == 1
    assert not ScrapedReading.objects.exists()

    exporter.state = lambda: [(GPU, Reading(util=float("nan"), power_w=-5.0))]
    source_pull(source=source, now=_now())
    kept = {metric for metric, _, _ in ScrapedReading.objects.get().series}
    assert "DCGM_FI_DEV_FB_USED" in kept  # the rest of the scrape is kept...
    assert not kept & {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL",
                       "DCGM_FI_DEV_POWER_USAGE"}  # ...but NaN and negative readings


@pytest.mark.parametrize(("auth", "username", "header"), [
    ("bearer", "", "Bearer s3cr3t"),
    ("basic", "gq", "Basic Z3E6czNjcjN0"),  # gq:s3cr3t
])
def test_credentials_are_sent_and_a_refusal_is_named(exporter, cluster, auth, username, header):
    from gpuquota.telemetry.secrets import secret_seal

    exporter.authorization = header
    sealed, prefix = secret_seal("s3cr3t")
    source = TelemetrySource.objects.create(
        name="auth", cluster=cluster, kind="exporter", urls=exporter.url, window_s=WINDOW_S,
        auth=auth, username=username, secret_encrypted=sealed, secret_prefix=prefix)
    source_pull(source=source, now=_now())
    source.refresh_from_db()
    assert source.last_error == "" and ScrapedReading.objects.count() == 1
    source.secret_encrypted, _ = secret_seal("wrong")
    source.save()
    source_pull(source=source, now=_now())
    source.refresh_from_db()
    assert "refused with 401" in source.last_error and ScrapedReading.objects.count() == 1
    assert "s3cr3t" not in source.last_error and "wrong" not in source.last_error
