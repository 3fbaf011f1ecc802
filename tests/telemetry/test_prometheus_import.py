"""The Prometheus importer against Debian's Prometheus, over an hour of back-filled
dcgm-exporter history (`promtool tsdb create-blocks-from openmetrics`)."""

from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command

from gpuquota.ingest.models import GpuEvent, ProcessRecord, Sample
from gpuquota.inventory.models import Gpu, GpuClass, GpuModelMapping
from gpuquota.telemetry.labels import mig_device_uuid
from gpuquota.telemetry.models import SourceGpu, TelemetrySource
from tests.telemetry import scenario as sc
from tests.telemetry.conftest import hours_ago
from tests.telemetry.exporter import openmetrics

pytestmark = [pytest.mark.prometheus, pytest.mark.django_db(transaction=False)]


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


@pytest.fixture
def history_source(prometheus_with, cluster):
    start = hours_ago(4)
    server = prometheus_with(history=openmetrics(sc.history(start, 3600)))
    h100 = GpuClass.objects.create(name="H100-80GB")
    GpuModelMapping.objects.create(model_name="NVIDIA H100 80GB HBM3", gpu_class=h100)
    source = TelemetrySource.objects.create(
        name="prom-a", cluster=cluster, kind="prometheus", base_url=server.url,
        selector='job!="nothing"', window_s=60, scrape_interval_s=sc.STEP_S)
    return source, start


def _import(source, start, minutes=60) -> str:
    out = StringIO()
    call_command("telemetry_import", "--source", source.name, "--from",
                 at(start).isoformat(), "--to", at(start + minutes * 60).isoformat(), stdout=out)
    return out.getvalue()


def _samples(gpu_uuid: str) -> dict[int, Sample]:
    gpu = Gpu.objects.get(uuid=gpu_uuid.upper()[:4] + gpu_uuid[4:].lower())
    return {int(s.window_start.timestamp()): s for s in Sample.objects.filter(gpu=gpu)}


def test_an_hour_is_imported_as_the_agent_would_send_it(history_source):
    source, start = history_source
    report = _import(source, start)
    assert "3 stored" not in report and "rejected" in report

    pod = _samples(sc.POD_GPU.uuid)
    gap_windows = {start + w * 60 for w in range(20, 25)}
    assert set(pod) == {start + w * 60 for w in range(60)} - gap_windows  # gap: no data
    first = pod[start]
    assert first.readings == 6 and first.window_end == at(start + 60)
    assert first.util_gpu_avg == pytest.approx(sc.util_of(sc.POD_GPU, 0))
    assert pod[start + 600].util_gpu_avg == pytest.approx(sc.util_of(sc.POD_GPU, 10))
    assert pod[start + 600].memory_used_bytes_avg == (2048 + 10) * 1024 * 1024
    assert pod[start + 600].energy_j == pytest.approx(60 * sc.POWER_W)
    assert pod[start + 600].power_w_avg == pytest.approx(sc.POWER_W)

    # Keyed by UUID: the exporter pod's Hostname never names a node of the GPU... except
    # when a GPU is new, where the source's node label places it.
    gpus = {g.uuid: g for g in Gpu.objects.select_related("node", "gpu_class")}
    assert gpus[sc.POD_GPU.uuid.upper()[:4] + sc.POD_GPU.uuid[4:].lower()].gpu_class == \
        GpuClass.objects.get(name="H100-80GB")
    assert {g.node.hostname for g in gpus.values()} == {"dcgm-exporter-x7k2p", "gpu-node-02"}


def test_the_utilization_metric_is_chosen_per_gpu_and_recorded(history_source):
    source, start = history_source
    _import(source, start)
    used = dict(SourceGpu.objects.values_list("gpu__uuid", "util_metric"))
    assert used[sc.SLURM_GPU.uuid] == "DCGM_FI_DEV_GPU_UTIL"
    assert used[sc.MIG_GPU.uuid] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    slurm = _samples(sc.SLURM_GPU.uuid)
    assert slurm[start + 120].util_gpu_avg == pytest.approx(sc.util_of(sc.SLURM_GPU, 2))


def test_mig_instances_are_devices_of_their_gpu_and_blanks_are_dropped(history_source):
    source, start = history_source
    _import(source, start)
    parent = Gpu.objects.get(uuid=sc.MIG_GPU.uuid)
    devices = {g.uuid: g for g in Gpu.objects.filter(parent=parent)}
    assert set(devices) == {mig_device_uuid(parent.uuid, i) for i in sc.MIG_GPU.mig_instances}
    assert {g.model_name for g in devices.values()} == {f"{sc.MIG_GPU.model} MIG 3g.40gb"}
    own = _samples(sc.MIG_GPU.uuid)
    assert len(own) == 60
    window = own[start + 300]
    assert window.readings == 6  # not 12: two instances, one GPU
    assert window.energy_j == pytest.approx(60 * sc.POWER_W)  # not doubled
    assert window.memory_used_bytes_avg == (2048 + 5) * 1024 * 1024  # instances summed
    assert window.util_gpu_avg is None  # as the agent's: utilization is the devices'
    assert own[start + 600].power_w_avg is None  # the power field was DCGM's blank
    for device in devices.values():
        mine = {int(s.window_start.timestamp()): s for s in Sample.objects.filter(gpu=device)}
        assert len(mine) == 60
        assert mine[start + 300].util_gpu_avg == pytest.approx(sc.util_of(sc.MIG_GPU, 5))
        assert mine[start + 300].memory_used_bytes_avg == round((2048 + 5) / 2 * 1024 * 1024)
        assert mine[start + 300].power_w_avg is None


def test_counter_reset_and_xid_change_become_events(history_source):
    source, start = history_source
    _import(source, start)
    slurm = _samples(sc.SLURM_GPU.uuid)
    assert slurm[start + sc.RESET_AT].energy_j is None
    assert slurm[start + sc.RESET_AT + 60].energy_j == pytest.approx(60 * sc.POWER_W)
    events = list(GpuEvent.objects.filter(gpu__uuid=sc.SLURM_GPU.uuid).order_by("ts")
                  .values_list("type", "xid", "ts"))
    assert events == [("counter_reset", None, at(start + sc.RESET_AT)),
                      ("xid", 79, at(start + sc.XID_AT))]


def test_pod_and_hpc_job_labels_become_process_records(history_source):
    source, start = history_source
    _import(source, start)
    pod = ProcessRecord.objects.filter(gpu__uuid=sc.POD_GPU.uuid.upper()[:4]
                                       + sc.POD_GPU.uuid[4:].lower())
    assert pod.count() == 55
    record = pod.first()
    assert (record.job_source, record.job_account, record.job_id, record.command) == (
        "kubernetes", "vision", "train-resnet-0", "pytorch")
    slurm = ProcessRecord.objects.filter(gpu__uuid=sc.SLURM_GPU.uuid)
    assert set(slurm.values_list("job_source", "job_id")) == {("slurm", "424242")}
    assert not ProcessRecord.objects.filter(gpu__uuid=sc.IDLE_GPU.uuid).exists()  # no label


def test_importing_again_stores_nothing_twice(history_source):
    source, start = history_source
    _import(source, start, minutes=30)
    # 4 GPUs and 2 MIG devices a window; the gap's 5 windows are in the first half
    assert Sample.objects.count() == 6 * 30 - 5
    report = _import(source, start, minutes=60)  # overlaps the first half
    assert Sample.objects.count() == 6 * 60 - 5
    assert "samples 180 stored, 175 already there, 0 conflicting" in report, report
    again = _import(source, start, minutes=60)
    assert Sample.objects.count() == 6 * 60 - 5
    assert "samples 0 stored" in again, again
    assert GpuEvent.objects.count() == 2


def test_the_pull_follows_its_cursor(history_source):
    source, start = history_source
    from gpuquota.telemetry.services import source_pull

    source.cursor = at(start)
    source.delay_s = 0
    source.save()
    # a window is imported once the one after it has closed too
    result = source_pull(source=source, now=at(start + 1800 + 60 + 30))
    source.refresh_from_db()
    assert source.cursor == at(start + 1800) and source.last_error == ""
    assert result.windows == 30
    source_pull(source=source, now=at(start + 3600 + 60))
    source.refresh_from_db()
    assert source.cursor == at(start + 3600)
    assert len(_samples(sc.IDLE_GPU.uuid)) == 60
    assert all(s.util_gpu_avg == 0 for s in _samples(sc.IDLE_GPU.uuid).values())


def test_a_failing_source_is_recorded_and_imports_nothing(history_source):
    source, start = history_source
    from gpuquota.telemetry.services import source_pull

    source.base_url = "http://127.0.0.1:9"  # nothing listens
    source.cursor = at(start)
    source.save()
    assert source_pull(source=source, now=at(start + 600)) is None
    source.refresh_from_db()
    assert "cannot connect" in source.last_error and source.failures == 1
    assert source.cursor == at(start) and not Sample.objects.exists()


def test_chunks_stay_under_eleven_thousand_points(history_source, monkeypatch):
    source, start = history_source
    from gpuquota.telemetry import conf

    monkeypatch.setattr(conf, "MAX_POINTS_PER_SERIES", 7)  # 7 windows a query
    _import(source, start, minutes=30)
    assert len(_samples(sc.MIG_GPU.uuid)) == 30



def test_a_gpu_reported_by_its_agent_too_is_counted_once_on_its_node(history_source):
    """Mixed fleets: the agent reported the first ten windows of a GPU (other values);
    the importer's records for them are not stored (the first stored wins; different
    values count as conflicts), and the GPU stays on the agent's node whatever the
    exporter's Hostname says."""
    from gpuquota.ingest.batches import batch_ingest
    from gpuquota.ingest.protocol import batch_check
    from tests.ingest.factories import batch, enrolled, gpu_entry, sample

    source, start = history_source
    node = enrolled("gpu-node-07", cluster=source.cluster).node
    body = batch(gpus=[gpu_entry(sc.SLURM_GPU.uuid, name=sc.SLURM_GPU.model)],
                 samples=[sample(sc.SLURM_GPU.uuid, at(start + w * 60), util_gpu_avg=99.0,
                                 util_gpu_max=99.0) for w in range(10)])
    assert batch_ingest(node=node, body=batch_check(body), now=at(start + 660),
                        check_age=False).status == 202
    report = _import(source, start)
    assert "345 stored, 0 already there, 10 conflicting" in report, report  # other values
    slurm = _samples(sc.SLURM_GPU.uuid)
    assert len(slurm) == 60
    assert [float(slurm[start + w * 60].util_gpu_avg) for w in range(9, 11)] == [
        99.0, sc.util_of(sc.SLURM_GPU, 10)]
    assert Gpu.objects.get(uuid=sc.SLURM_GPU.uuid).node == node


@pytest.mark.postgres  # elsewhere each batch is stored on its own
def test_steady_pulls_store_each_window_once_and_every_node_in_one_go(history_source):
    """Pulls made with the same source instance go on from its cursor (nothing imported
    twice), and a pull stores all its nodes' batches together: one receipts insert and
    one update of their responses, whatever the nodes."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from gpuquota.ingest.models import AgentBatch
    from gpuquota.telemetry.services import source_pull

    source, start = history_source
    source.cursor = at(start)
    source.delay_s = 0
    source.save()
    source_pull(source=source, now=at(start + 600 + 60))
    for minute in (11, 12):
        with CaptureQueriesContext(connection) as queries:
            result = source_pull(source=source, now=at(start + minute * 60 + 60))
        assert result.windows == 1 and source.cursor == at(start + minute * 60)
        assert result.counts["samples"]["duplicates"] == 0
        assert result.counts["samples"]["stored"] == 6  # 4 GPUs and 2 MIG devices
        statements = [q["sql"] for q in queries.captured_queries]
        assert sum(s.startswith(f"INSERT INTO {AgentBatch._meta.db_table}")
                   for s in statements) == 1
        assert sum(s.startswith(f"UPDATE {AgentBatch._meta.db_table} AS a SET response_body")
                   for s in statements) == 1
    assert len({b.node_id for b in AgentBatch.objects.all()}) == 2
    assert len(_samples(sc.IDLE_GPU.uuid)) == 12  # windows 0 to 11
