"""One scenario fed once through the agent protocol (the endpoint, as a node's agent) and
once through the Prometheus importer (Debian's Prometheus over the same figures written
by promtool) gives identical utilization and identical statement lines. Values are
constant within each 60 s window, so equality is exact."""

from dataclasses import asdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.test import Client

from accounts.models import ClusterIdentity
from gpuquota.ingest.partitions import partitions_ensure
from gpuquota.inventory.models import Gpu, GpuModelMapping
from gpuquota.telemetry.importer import range_import
from gpuquota.telemetry.models import TelemetrySource
from gpuquota.usage.selectors import fleet_utilization, team_utilization
from gpuquota.usage.sweep import dirty_hours_process
from reports.services_statements import month_period, statement_draft
from tests.factories import GpuClassFactory, RateCardFactory, TeamFactory
from tests.ingest.factories import Agent, enrolled
from tests.telemetry.exporter import Gpu as ExporterGpu
from tests.telemetry.exporter import Reading, openmetrics
from tests.usage.factories import reserve

pytestmark = [pytest.mark.prometheus, pytest.mark.django_db]

START = datetime(2026, 11, 10, 10, tzinfo=UTC)
END = START + timedelta(hours=2)
MINUTE = timedelta(minutes=1)
STEP_S, WINDOW_S, MIB = 10, 60, 1024 * 1024
AFTER = datetime(2026, 12, 6, 12, tzinfo=UTC)

VISION_GPU = ExporterGpu(uuid="GPU-11111111-2222-3333-4444-555555555555", index=0,
                         hostname="gpu-node-01", pod=("vision", "train-0", "pytorch"))
SPEECH_GPU = ExporterGpu(uuid="GPU-66666666-7777-8888-9999-aaaaaaaaaaaa", index=1,
                         hostname="gpu-node-01", pod=("speech", "asr-1", "asr"))
IDLE_GPU = ExporterGpu(uuid="GPU-bbbbbbbb-cccc-dddd-eeee-ffffffffffff", index=2,
                       hostname="gpu-node-01")
SPEECH_FROM, SPEECH_UNTIL = 30, 90  # speech's pod runs in these windows only


def util_of(gpu: ExporterGpu, window: int) -> float:
    """Constant within a window; some windows under the busy threshold (5 %)."""
    return 0.0 if gpu is IDLE_GPU else float((window * 7 + gpu.index * 13) % 101)


def truth(window: int) -> list[tuple[ExporterGpu, Reading]]:
    out = []
    for gpu in (VISION_GPU, SPEECH_GPU, IDLE_GPU):
        labelled = gpu
        if gpu is SPEECH_GPU and not SPEECH_FROM <= window < SPEECH_UNTIL:
            labelled = ExporterGpu(uuid=gpu.uuid, index=gpu.index, hostname=gpu.hostname)
        out.append((labelled, Reading(util=util_of(gpu, window), fb_mib=1000.0 + window)))
    return out


def _history() -> str:
    first = int(START.timestamp())
    return openmetrics([(first + offset, truth(offset // WINDOW_S))
                        for offset in range(0, int((END - START).total_seconds()), STEP_S)])


def _agent_batches() -> list[dict]:
    """What an agent polling every 10 s would send for the same GPUs, 30 windows a batch."""
    windows = int((END - START) / MINUTE)
    batches = []
    for first in range(0, windows, 30):
        samples, processes = [], []
        for window in range(first, first + 30):
            start = START + window * MINUTE
            span = {"window_start": f"{start:%Y-%m-%dT%H:%M:%SZ}",
                    "window_end": f"{start + MINUTE:%Y-%m-%dT%H:%M:%SZ}"}
            for gpu, reading in truth(window):
                samples.append({"gpu_uuid": gpu.uuid, **span, "readings": 6,
                                "util_gpu_avg": reading.util, "util_gpu_max": reading.util,
                                "memory_used_bytes_avg": int(reading.fb_mib * MIB),
                                "memory_used_bytes_max": int(reading.fb_mib * MIB),
                                "power_w_avg": reading.power_w})
                if gpu.pod:
                    namespace, pod, container = gpu.pod
                    processes.append({"gpu_uuid": gpu.uuid, **span, "pid": 4000 + gpu.index,
                                      "pid_start": 1, "command": container,
                                      "job": {"source": "kubernetes", "id": pod,
                                              "account": namespace}})
        batches.append({
            "schema_version": 1, "batch_id": f"00000000-0000-4000-8000-{first:012d}",
            "agent_instance_id": "00000000-0000-4000-8000-00000000000a",
            "sent_at": f"{START + (first + 30) * MINUTE:%Y-%m-%dT%H:%M:%SZ}",
            "node": {"hostname": "gpu-node-01"},
            "gpus": [{"uuid": g.uuid, "index": g.index, "name": g.model}
                     for g in (VISION_GPU, SPEECH_GPU, IDLE_GPU)],
            "samples": samples, "processes": processes})
    return batches


@pytest.fixture
def organisation(cluster):
    h100 = GpuClassFactory(name="H100-80GB")
    GpuModelMapping.objects.create(model_name=VISION_GPU.model, gpu_class=h100)
    RateCardFactory(gpu_class=h100, valid_from=START - timedelta(days=60),
                    reserved_rate=Decimal("2.50"), on_demand_rate=Decimal("3.00"))
    teams = {slug: TeamFactory(name=slug.title(), slug=slug) for slug in ("vision", "speech")}
    for slug, team in teams.items():
        ClusterIdentity.objects.create(cluster=cluster, kind=ClusterIdentity.Kind.K8S_NAMESPACE,
                                       key=slug, team=team, valid_from=START - timedelta(days=1))
    partitions_ensure(days=[START.date()])
    return teams


def _figures(teams) -> dict:
    """Utilization and statement lines, after the reservation and the rollup sweep."""
    gpu = Gpu.objects.get(uuid=VISION_GPU.uuid)
    reserve(teams["vision"], gpu, START, START + timedelta(hours=1))
    while dirty_hours_process():
        pass
    period = month_period(date(2026, 11, 1))
    figures = {"fleet": asdict(fleet_utilization(period=period))}
    for slug, team in teams.items():
        figures[slug] = asdict(team_utilization(team=team, period=period))
        statement = statement_draft(team=team, period=period, now=AFTER)
        figures[f"{slug} lines"] = [
            (line.kind, line.gpu_class_name, line.seconds, line.rate, line.amount)
            for line in statement.lines.order_by("position")]
    return figures


def _through_the_agent(cluster, teams, time_machine) -> dict:
    issued = enrolled("gpu-node-01", cluster=cluster)
    agent = Agent(issued.key, Client())
    batches = _agent_batches()
    time_machine.move_to(START, tick=False)  # the agent starts: its GPUs are registered
    hello = {**batches[0], "batch_id": "00000000-0000-4000-8000-0000000000ff",
             "sent_at": f"{START:%Y-%m-%dT%H:%M:%SZ}", "samples": [], "processes": []}
    assert agent.post(hello).status_code == 202
    for body in batches:
        time_machine.move_to(datetime.fromisoformat(body["sent_at"]) + MINUTE, tick=False)
        response = agent.post(body)
        assert response.status_code == 202 and not response.json()["rejected"], response.json()
    time_machine.move_to(AFTER, tick=False)
    return _figures(teams)


def _through_the_importer(prometheus_with, cluster, teams, time_machine) -> dict:
    time_machine.move_to(AFTER, tick=False)
    server = prometheus_with(history=_history())
    source = TelemetrySource.objects.create(name="prom-a", cluster=cluster, kind="prometheus",
                                            base_url=server.url, window_s=WINDOW_S)
    result = range_import(source=source, start=START, end=END)
    assert result.counts["samples"]["stored"] == 3 * 120 and result.rejected == 0
    return _figures(teams)


def test_the_agent_and_the_importer_give_the_same_figures_and_lines(
        prometheus_with, cluster, organisation, time_machine):
    with transaction.atomic():
        by_agent = _through_the_agent(cluster, organisation, time_machine)
        transaction.set_rollback(True)
    by_importer = _through_the_importer(prometheus_with, cluster, organisation, time_machine)
    assert by_agent["vision lines"][0][:3] == ("reserved", "H100-80GB", 3600)
    assert any(kind == "on_demand" for kind, *_ in by_agent["speech lines"]), by_agent
    assert by_agent["vision"]["sums"]["busy_s"] > 0
    assert by_importer == by_agent
