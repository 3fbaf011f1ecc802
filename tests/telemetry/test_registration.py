"""GPUs an import sees for the first time are registered in bulk, each as `gpu_register`
would (node and class intervals from its first window, MIG devices under their GPU); one
that an agent registered meanwhile stays on its agent's node and the rest are still
registered."""

import uuid
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpuquota.inventory.models import Gpu, GpuClassInterval, GpuNodeInterval
from gpuquota.inventory.services import gpu_register
from gpuquota.telemetry.importer import ImportResult, _gpus_register, reports_store
from gpuquota.telemetry.models import TelemetrySource, UtilMetric
from gpuquota.telemetry.normalise import GpuReport, Unit
from tests.ingest.factories import enrolled

pytestmark = pytest.mark.django_db

T = 1_793_000_000 - 1_793_000_000 % 60
NOW = datetime.fromtimestamp(T + 3600, UTC)
FIRST = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
SECOND = "GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
MIG = "MIG-63bc0b91-2265-1b94-831c-15c41fe92675"


def _report(gpu_uuid: str, index: int, *, parent: str | None = None) -> GpuReport:
    labels = {"Hostname": "node-1", "modelName": "NVIDIA H100 80GB HBM3", "gpu": str(index)}
    units = [Unit("exporter-first-life",
                  (gpu_uuid, ws, ws + 60, 2, 50.0, 50.0, *(None,) * 11))
             for ws in range(T + 120, T + 600, 60)]
    return GpuReport(uuid=gpu_uuid, labels=labels, util_metric=UtilMetric.GR_ENGINE_ACTIVE,
                     parent_uuid=parent, index=index if parent else None, units=units)


def _store(source: TelemetrySource, reports: list[GpuReport]) -> ImportResult:
    result = ImportResult()
    reports_store(source=source, reports=reports, start=T, stop=T + 600, now=NOW,
                  result=result)
    return result


def test_new_gpus_and_mig_devices_registered_from_their_first_window(cluster):
    source = TelemetrySource.objects.create(name="p", cluster=cluster, kind="prometheus",
                                            base_url="http://127.0.0.1:9090")
    result = _store(source, [_report(FIRST, 0), _report(SECOND, 1),
                             _report(MIG, 3, parent=FIRST)])
    assert result.counts["samples"]["stored"] == 24 and result.rejected == 0
    gpus = {g.uuid: g for g in Gpu.objects.select_related("node", "parent")}
    first = datetime.fromtimestamp(T + 120, UTC)
    assert {g.node.hostname for g in gpus.values()} == {"node-1"}
    assert gpus[MIG].parent == gpus[FIRST] and gpus[MIG].gpu_class == gpus[FIRST].gpu_class
    assert {g.commissioned_at for g in gpus.values()} == {first}
    assert GpuNodeInterval.objects.filter(valid_from=first).count() == 3
    assert GpuClassInterval.objects.filter(valid_from=first).count() == 3


def test_registering_more_gpus_takes_no_more_queries(cluster):
    source = TelemetrySource.objects.create(name="p", cluster=cluster, kind="prometheus",
                                            base_url="http://127.0.0.1:9090")
    counted = []
    for count in (1, 2, 6):  # the first makes the node and the model's class
        uuids = [f"GPU-{uuid.UUID(int=count * 100 + i)}" for i in range(count)]
        with CaptureQueriesContext(connection) as queries:
            _gpus_register([_report(u, i) for i, u in enumerate(uuids)], source=source,
                           known={})
        counted.append(len(queries))
    assert counted[1] == counted[2]


def test_a_gpu_registered_meanwhile_keeps_its_agents_node(cluster):
    source = TelemetrySource.objects.create(name="p", cluster=cluster, kind="prometheus",
                                            base_url="http://127.0.0.1:9090")
    agents = enrolled("gpu-node-07", cluster=cluster).node
    known: dict = {}  # what the import found registered: nothing, then the agent's batch
    gpu_register(node=agents, uuid=SECOND, model_name="NVIDIA H100 80GB HBM3",
                 at=datetime.fromtimestamp(T, UTC))
    _gpus_register([_report(FIRST, 0), _report(SECOND, 1)], source=source, known=known)
    assert {u: g.node.hostname for u, g in known.items()} == {FIRST: "node-1",
                                                              SECOND: "gpu-node-07"}
    assert dict(Gpu.objects.values_list("uuid", "node__hostname")) == {
        FIRST: "node-1", SECOND: "gpu-node-07"}


def test_the_serial_label_a_site_adds_is_stored_and_none_is_needed(cluster):
    """dcgm-exporter's default counters put no serial on its series; a site whose counters
    file adds `DCGM_FI_DEV_SERIAL, label, ...` gets the label `DCGM_FI_DEV_SERIAL` on every
    series, kept as the GPU's board serial ("[N/A]" on a consumer board is none)."""
    source = TelemetrySource.objects.create(name="p", cluster=cluster, kind="prometheus",
                                            base_url="http://127.0.0.1:9090")
    first, second, mig = _report(FIRST, 0), _report(SECOND, 1), _report(MIG, 3, parent=FIRST)
    first.labels["DCGM_FI_DEV_SERIAL"] = "1654923012345"
    mig.labels["DCGM_FI_DEV_SERIAL"] = "1654923012345"
    second.labels["DCGM_FI_DEV_SERIAL"] = "[N/A]"
    result = _store(source, [first, second, mig])
    assert result.rejected == 0
    assert dict(Gpu.objects.values_list("uuid", "serial")) == {
        FIRST: "1654923012345", SECOND: "", MIG: ""}
