"""The two ways in read the same: exporters scraped directly (gpuquota computes the window
figures from the stored scrapes) and Prometheus (it computes them) give identical records
for the same readings, MIG, blanks, the counter reset, the XID change and pods included."""

from datetime import UTC, datetime

import pytest

from gpuquota.telemetry import exposition, prometheus
from gpuquota.telemetry.models import TelemetrySource
from gpuquota.telemetry.normalise import reports_build
from tests.telemetry import scenario as sc
from tests.telemetry.conftest import hours_ago
from tests.telemetry.exporter import exposition as exposition_text
from tests.telemetry.exporter import openmetrics

pytestmark = [pytest.mark.prometheus, pytest.mark.django_db]


def test_scraped_and_queried_figures_make_the_same_records(prometheus_with, cluster):
    start, seconds = hours_ago(4), 3600
    points = sc.history(start, seconds)
    server = prometheus_with(history=openmetrics(points))
    source = TelemetrySource(name="p", cluster=cluster, kind="prometheus", base_url=server.url,
                             window_s=60)
    queried = prometheus.window_figures(source, start=datetime.fromtimestamp(start - 60, UTC),
                                        end=datetime.fromtimestamp(start + seconds + 60, UTC))
    scraped = exposition.window_figures(
        [(at, exposition.exposition_parse(exposition_text(readings), where="t"))
         for at, readings in points], start=start - 60, stop=start + seconds + 60, window_s=60)
    by_prometheus, _ = reports_build(queried, start=start, stop=start + seconds, window_s=60)
    by_scrapes, _ = reports_build(scraped, start=start, stop=start + seconds, window_s=60)
    assert [r.uuid for r in by_scrapes] == [r.uuid for r in by_prometheus]
    for mine, theirs in zip(by_scrapes, by_prometheus, strict=True):
        assert mine.util_metric == theirs.util_metric
        assert mine.events == theirs.events
        assert mine.processes == theirs.processes
        for a, b in zip(mine.samples, theirs.samples, strict=True):
            assert a == pytest.approx(b), (a, b)
    assert sum(len(r.samples) for r in by_scrapes) == 6 * 60 - 5  # 4 GPUs, 2 MIG devices
