"""One month (`month.py`) fed once through the agent protocol (each node's agent posting
its batches to the endpoint) and once through dcgm-exporter's history in Debian's
Prometheus and the importer: the statement lines of every team, for October and
November, are equal to the cent, and so are the GPUs' health intervals. The month has a
failure (a GPU falling off the bus and back after a reboot), GPUs shared by two pods and
by two Slurm jobs, MIG with and without profiling fields, GPUs starting and stopping
mid-window, and the month's edge; the Kubernetes and the Slurm `hpc_job` variants."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.db import transaction
from django.test import Client

from accounts.models import ClusterIdentity
from gpuquota.ingest.models import Sample
from gpuquota.inventory.models import Gpu, GpuHealthInterval, GpuModelMapping
from gpuquota.schedulers.models import SlurmJob
from gpuquota.schedulers.slurm.jobs import job_fields
from gpuquota.telemetry import conf
from gpuquota.telemetry.importer import range_import
from gpuquota.telemetry.models import TelemetrySource
from gpuquota.usage.sweep import dirty_hours_process
from reports.services_statements import month_period, statement_draft
from tests.factories import ClusterFactory, GpuClassFactory, RateCardFactory, TeamFactory
from tests.ingest.factories import Agent, enrolled
from tests.telemetry import month as m
from tests.usage.factories import reserve

pytestmark = [pytest.mark.prometheus, pytest.mark.django_db]

AFTER = datetime(2026, 12, 6, 12, tzinfo=UTC)
TEAMS = ("vision", "nlp", "speech")


def _instant(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


@pytest.fixture
def site(db):
    clusters = {"k": ClusterFactory(name="Kube", slug="k"),
                "h": ClusterFactory(name="HPC", slug="h", scheduler="slurm")}
    for model, name, reserved, on_demand in ((m.H100, "H100-80GB", "2.50", "3.00"),
                                             (m.A100, "A100-80GB", "1.80", "2.20")):
        gpu_class = GpuClassFactory(name=name)
        GpuModelMapping.objects.create(model_name=model, gpu_class=gpu_class)
        RateCardFactory(gpu_class=gpu_class, valid_from=datetime(2026, 9, 1, tzinfo=UTC),
                        reserved_rate=Decimal(reserved), on_demand_rate=Decimal(on_demand))
    teams = {slug: TeamFactory(name=slug.title(), slug=slug) for slug in TEAMS}
    since = datetime(2026, 10, 1, tzinfo=UTC)
    for slug, team in teams.items():
        ClusterIdentity.objects.create(cluster=clusters["k"], team=team, key=slug,
                                       kind=ClusterIdentity.Kind.K8S_NAMESPACE, valid_from=since)
        ClusterIdentity.objects.create(cluster=clusters["h"], team=team, key=slug,
                                       kind=ClusterIdentity.Kind.SLURM_ACCOUNT, valid_from=since)
    return clusters, teams


def _figures(teams: dict) -> dict:
    """Statement lines and health intervals, after the reservations and the sweep."""
    reserve(teams["vision"], Gpu.objects.get(uuid=m.K0.uuid), _instant(m.K_FROM),
            datetime(2026, 11, 3, tzinfo=UTC))
    reserve(teams["speech"], Gpu.objects.get(uuid=m.H2.uuid), datetime(2026, 11, 15, tzinfo=UTC),
            datetime(2026, 11, 16, tzinfo=UTC))
    while dirty_hours_process():
        pass
    figures = {"health": sorted(GpuHealthInterval.objects.values_list(
        "gpu__uuid", "state", "valid_from", "valid_until"))}
    for month in (date(2026, 10, 1), date(2026, 11, 1)):
        for slug, team in teams.items():
            statement = statement_draft(team=team, period=month_period(month), now=AFTER)
            figures[f"{slug} {month:%Y-%m}"] = [
                (line.kind, line.gpu_class_name, line.seconds, line.rate, line.amount)
                for line in statement.lines.order_by("position")]
    return figures


def _through_the_agents(clusters: dict, teams: dict, time_machine) -> dict:
    sends = []
    for hostname in m.NODES:
        cluster = clusters[hostname[0]]
        agent = Agent(enrolled(hostname, cluster=cluster).key, Client())
        sends += [(sent, hostname, agent, body) for sent, body in m.agent_batches(hostname)]
    for sent, _, agent, body in sorted(sends, key=lambda s: (s[0], s[1])):
        time_machine.move_to(_instant(sent), tick=False)
        answer = agent.post(body)
        assert answer.status_code == 202 and not answer.json()["rejected"], answer.json()
    time_machine.move_to(AFTER, tick=False)
    return _figures(teams)


def _through_the_importer(prometheus_with, clusters: dict, teams: dict, time_machine,
                          monkeypatch) -> dict:
    time_machine.move_to(AFTER, tick=False)
    for job_id, (account, user) in m.JOBS.items():  # what the sacct import stored
        SlurmJob.objects.create(cluster=clusters["h"], **job_fields({
            "job_id": int(job_id), "state": {"current": ["COMPLETED"]},
            "time": {"submission": m.JOB_START - 60, "start": m.JOB_START, "end": m.JOB_END},
            "account": account, "user": user, "partition": "gpu", "nodes": "h-node-1",
            "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 1}]}}))
    server = prometheus_with(history=m.openmetrics_history())
    monkeypatch.setattr(conf, "CHUNK_S", 7 * 86400)
    for name, cluster in clusters.items():
        source = TelemetrySource.objects.create(
            name=f"{name}-prom", cluster=cluster, kind="prometheus", base_url=server.url,
            selector=f'cluster="{name}"', window_s=m.WINDOW_S, scrape_interval_s=m.TICK_S)
        result = range_import(source=source, start=datetime(2026, 10, 31, tzinfo=UTC),
                              end=datetime(2026, 12, 1, tzinfo=UTC))
        assert result.rejected == 0 and result.unknown_jobs == 0, result
    return _figures(teams)


def test_a_month_costs_the_same_through_the_agent_and_through_prometheus(
        prometheus_with, site, time_machine, monkeypatch):
    clusters, teams = site
    with transaction.atomic():
        by_agent = _through_the_agents(clusters, teams, time_machine)
        transaction.set_rollback(True)
    by_importer = _through_the_importer(prometheus_with, clusters, teams, time_machine,
                                        monkeypatch)
    # The month is what it says: every kind of line the issue lists is there.
    lines = {key: {(kind, gpu_class): seconds for kind, gpu_class, seconds, *_ in found}
             for key, found in by_agent.items() if key != "health"}
    # K0 reserved from 22:00; half of K1's busy time (shared with nlp's pod)
    assert lines["vision 2026-10"] == {("reserved", "H100-80GB"): 7200,
                                       ("on_demand", "H100-80GB"): 3600}
    assert lines["vision 2026-11"][("failure_credit", "H100-80GB")] == m.BACK_AT - m.FAIL_AT
    # K3 from 22:00:40 (40 s into its window), busy until midnight
    assert lines["speech 2026-10"] == {("on_demand", "H100-80GB"): 2 * 3600 - 40}
    assert ("on_demand", "A100-80GB") in lines["nlp 2026-11"]  # K2's busy instance
    assert ("on_demand", "A100-80GB") not in lines["speech 2026-11"]  # its idle one
    assert ("reserved", "A100-80GB") in lines["speech 2026-11"]  # H2, no data
    assert {("nlp", "H100-80GB"), ("vision", "H100-80GB")} <= {
        (team, gpu_class) for team in TEAMS
        for kind, gpu_class in lines[f"{team} 2026-11"] if kind == "on_demand"}
    assert [state for _, state, *_ in by_agent["health"]] == ["failed", "degraded"]
    assert by_importer == by_agent
    # MIG without profiling fields is no data, never 0 % (some releases print GPU_UTIL 0)
    assert not Sample.objects.filter(gpu__parent__uuid=m.H2.uuid).exists()
    assert not Sample.objects.filter(gpu__uuid=m.H2.uuid, util_gpu_avg__isnull=False).exists()
