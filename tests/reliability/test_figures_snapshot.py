"""The reliability figures computed by the `reliability.figures` task, not per request: the
page, the API's present figures and /metrics read its latest snapshot; a fresh install
computes one at its first read; replays (`as_of`) compute on request, rate-limited."""

from datetime import datetime, timedelta

import pytest

from gpuquota.celery import collect_beat_schedule
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.reliability.models import FiguresSnapshot, UnitFigures
from gpuquota.reliability.pages import failed_now
from gpuquota.reliability.snapshot import FIGURES_INTERVAL_S
from gpuquota.reliability.tasks import figures_task
from tests.factories import AdminFactory
from tests.helpers import assert_api_error
from tests.reliability.factories import event_add, fleet_build

FIGURES = "/api/v1/reliability/figures"
LEMONS = "/api/v1/reliability/lemons"


@pytest.fixture
def fleet(db, clock):
    return fleet_build(as_of=clock.now - timedelta(hours=1))


@pytest.fixture
def admin_client(client):
    client.force_login(AdminFactory())
    return client


def h100_failures(client) -> int:
    body = client.get(FIGURES).json()
    return next(row["failures"] for row in body["figures"] if row["key"] == "H100-80GB")


def test_the_task_is_on_beat_and_writes_one_snapshot_per_instant(fleet, clock):
    entry = collect_beat_schedule()["reliability-figures"]
    assert (entry["task"], entry["schedule"]) == ("reliability.figures", FIGURES_INTERVAL_S)
    assert figures_task.apply().result["gpu_lemons"] == 1
    figures_task.apply()  # idempotent: the same instant again replaces it
    clock.shift(60)
    figures_task.apply()  # a later one replaces the earlier
    (snapshot,) = FiguresSnapshot.objects.all()
    assert snapshot.as_of == clock.now
    units = UnitFigures.objects.filter(snapshot=snapshot)
    assert units.filter(kind="gpu").count() == 20 and units.filter(kind="node").count() == 5
    lemon = units.get(kind="gpu", key=fleet["lemon"].uuid).figures
    assert lemon["failures"] == 5 and lemon["hardware_warnings"] == 1
    assert lemon["ci95_low"] < lemon["failures_per_1000_gpu_days"] < lemon["ci95_high"]


def test_page_api_and_metrics_read_the_snapshot_until_the_next_run(
        fleet, admin_client, clock, settings):
    settings.METRICS_ALLOWED_NETWORKS = "127.0.0.0/8"
    figures_task.apply()
    computed = clock.now
    clock.shift(300)
    event_add(fleet["gpus"][3], clock.now - timedelta(minutes=1), 79)  # after the run
    assert h100_failures(admin_client) == 7
    page = admin_client.get("/fleet/reliability/").content.decode()
    assert 'id="reliability-computed"' in page and "<strong>late</strong>" not in page
    assert "reliability.figures" in page
    assert datetime.fromisoformat(admin_client.get(FIGURES).json()["as_of"]) == computed
    metrics = admin_client.get("/metrics").content.decode()
    assert 'gpuquota_gpu_failures_90d{gpu_class="H100-80GB"} 7.0' in metrics
    assert "gpuquota_reliability_figures_as_of_timestamp_seconds " in metrics
    figures_task.apply()
    assert h100_failures(admin_client) == 8
    by_gpu = {r["key"]: r for r in admin_client.get(FIGURES, {"group": "gpu"}).json()["figures"]}
    assert by_gpu[fleet["gpus"][3].uuid]["failures"] == 1 and len(by_gpu) == 20


def test_a_fresh_install_computes_once_and_a_late_snapshot_says_so(fleet, admin_client, clock):
    assert not FiguresSnapshot.objects.exists()
    page = admin_client.get("/fleet/reliability/").content.decode()
    assert fleet["lemon"].uuid in page and "xid 79 x5" in page
    assert FiguresSnapshot.objects.count() == 1
    clock.shift(2 * FIGURES_INTERVAL_S + 1)
    page = admin_client.get("/fleet/reliability/").content.decode()
    assert "<strong>late</strong>, is Celery beat running?" in page
    assert FiguresSnapshot.objects.count() == 1  # read, not computed again


def test_a_replay_computes_on_request_and_is_rate_limited(fleet, admin_client, clock, settings):
    settings.RELIABILITY_REPLAY_RATE = "2/min"
    figures_task.apply()
    before = clock.now - timedelta(days=4)  # before the lemon's last failure
    for _ in range(3):  # answers from the snapshot are not counted
        assert len(admin_client.get(LEMONS).json()["flagged"]) == 1
    replayed = admin_client.get(FIGURES, {"as_of": before.isoformat()}).json()
    assert datetime.fromisoformat(replayed["as_of"]) == before
    assert next(r for r in replayed["figures"] if r["key"] == "H100-80GB")["failures"] == 6
    assert admin_client.get(FIGURES, {"days": 30}).status_code == 200
    assert_api_error(admin_client.get(LEMONS, {"as_of": before.isoformat()}), 429)


def test_failed_now_lists_the_longest_failed_and_counts_all(fleet, clock):
    for n, gpu in enumerate(fleet["gpus"][:3]):
        GpuHealthInterval.objects.create(gpu=gpu, state="failed", reason="xid 79",
                                         valid_from=clock.now - timedelta(hours=3 - n))
    event_add(fleet["gpus"][0], clock.now - timedelta(hours=3), 79)
    shown, count = failed_now(now=clock.now, limit=2)
    assert count == 3
    assert [row["gpu"].uuid for row in shown] == [g.uuid for g in fleet["gpus"][:2]]
    assert shown[0]["incident"].label == "xid 79" and shown[1]["incident"] is None
