import pytest

from gpuquota.ingest import partitions
from tests.factories import ClusterFactory
from tests.telemetry.promserver import Prometheus, backfill

LOOPBACK = "127.0.0.0/8,::1/128"


@pytest.fixture(autouse=True)
def _loopback_allowed(monkeypatch):
    """These tests run Prometheus and exporters on loopback, which sources may reach only
    where the site allows it (docs/telemetry.md, "Where sources may connect")."""
    monkeypatch.setenv("TELEMETRY_ALLOWED_NETWORKS", LOOPBACK)


@pytest.fixture(autouse=True)
def _forget_partitions():
    """Test transactions roll partitions back: never trust another test's cache."""
    partitions._known.clear()
    yield
    partitions._known.clear()


FIXED_NOW = 1_794_729_600  # 2026-11-15T08:00:00Z: history is written at fixed instants


def hours_ago(hours: int) -> int:
    """A whole hour `hours` before the tests' fixed instant, in Unix seconds (Prometheus
    keeps ten years of history: any fixed instant of these years will do)."""
    return FIXED_NOW - hours * 3600


@pytest.fixture
def cluster(db):
    return ClusterFactory(name="Kube A", slug="kube-a")


@pytest.fixture
def prometheus_with(tmp_path):
    """Start a Prometheus over back-filled history (OpenMetrics text) and/or scraping
    targets; stopped at the end of the test."""
    started = []

    def start(*, history: str | None = None, targets=(), scrape_interval_s: int = 1):
        server = Prometheus(tmp_path / f"prom{len(started)}", targets=list(targets),
                            scrape_interval_s=scrape_interval_s)
        if history is not None:
            backfill(server.data_dir, history)
        started.append(server.start())
        return server

    yield start
    for server in started:
        server.stop()
