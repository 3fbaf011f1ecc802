"""Telemetry import benchmark: a back-fill from Debian's Prometheus against the time
Prometheus itself takes to answer the same queries, and against the agent endpoint.

    .venv/bin/python -m bench.telemetry_import [--gpus 1000] [--hours 24] [--step 30]

It creates (drops first) its own PostgreSQL database, writes `--hours` of dcgm-exporter
history for `--gpus` GPUs (8 a node, a reading every `--step` seconds: utilization from
the profiling field, memory, power, energy, XID, a pod on every other GPU) as OpenMetrics
text, loads it with `promtool tsdb create-blocks-from openmetrics`, starts Prometheus on
a loopback port, then measures, in this one run:

1. prometheus: the importer's very queries (`query_range`, the same parameters and
   chunks), sent with `requests` and read to the last byte, nothing parsed: Prometheus's
   own answer time;
2. import: `manage.py telemetry_import`'s service over the whole range (read, normalise,
   store through the agent's ingestion, registering the GPUs), wall and CPU seconds of
   this process; the overhead is import wall / prometheus wall;
3. agent: the same number of samples per GPU-window for `--agent-gpus` GPUs posted to the
   agent endpoint (POST /api/v1/agent/batches through Django's test client, in process):
   samples stored per CPU-second, to compare with the import's.

It is not a test. Needs PostgreSQL on 127.0.0.1:5432 and Debian's prometheus/promtool.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.ingest import database_create, env_for  # noqa: E402

PER_NODE = 8


def gpu_uuids(count: int) -> list[str]:
    return [f"GPU-{uuid.UUID(int=index + 1)}" for index in range(count)]


def history_write(path: Path, *, uuids: list[str], start: int, seconds: int, step: int) -> int:
    """OpenMetrics history; returns the number of lines."""
    families = {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": lambda i, t: ((t // 60 + i) % 100) / 100,
        "DCGM_FI_DEV_FB_USED": lambda i, t: 1000 + (t // 60) % 500,
        "DCGM_FI_DEV_POWER_USAGE": lambda i, t: 300,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": lambda i, t: (t - start) * 300_000,
        "DCGM_FI_DEV_XID_ERRORS": lambda i, t: 0,
    }
    labels = []
    for index, gpu in enumerate(uuids):
        pod = (f',namespace="team-{index % 7}",pod="job-{index}",container="main"'
               if index % 2 == 0 else "")
        labels.append(f'{{gpu="{index % PER_NODE}",UUID="{gpu}",device="nvidia{index % 8}",'
                      f'modelName="NVIDIA H100 80GB HBM3",Hostname="node-{index // 8:04d}"'
                      f'{pod}}}')
    lines = 0
    with path.open("w") as out:
        for metric, value in families.items():
            out.write(f"# TYPE {metric} gauge\n")
            for index, label in enumerate(labels):
                rows = [f"{metric}{label} {value(index, t):g} {t}\n"
                        for t in range(start, start + seconds, step)]
                out.writelines(rows)
                lines += len(rows)
        out.write("# EOF\n")
    return lines


def prometheus_start(workdir: Path, data: Path) -> tuple[subprocess.Popen, str]:
    import requests

    from tests.telemetry.promserver import free_port

    port = free_port()
    (workdir / "prometheus.yml").write_text("global:\n  scrape_interval: 30s\n")
    process = subprocess.Popen(
        ["prometheus", f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}",
         "--storage.tsdb.retention.time=3650d"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return process, url
        except requests.RequestException:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("prometheus did not start")


def prometheus_alone(source, *, start: datetime, end: datetime) -> tuple[float, int]:
    """Wall seconds and bytes of the importer's queries, answered and read, not parsed."""
    import requests

    from gpuquota.telemetry import conf
    from gpuquota.telemetry.fields import FIGURES
    from gpuquota.telemetry.prometheus import EPSILON_S, figure_query

    window_s = source.window_s
    first = int(start.timestamp()) - window_s  # the importer reads one window before
    stop = int(end.timestamp())
    chunk_s = max(window_s, conf.CHUNK_S - conf.CHUNK_S % window_s)
    size, began = 0, time.perf_counter()
    with requests.Session() as session:
        for chunk in range(first + window_s, stop, chunk_s):
            chunk_first = chunk - window_s
            chunk_stop = min(stop, chunk + chunk_s)
            for figure in FIGURES:
                params = {"query": figure_query(figure, selector="", window_s=window_s),
                          "start": f"{chunk_first + window_s - EPSILON_S:.3f}",
                          "end": f"{chunk_stop - EPSILON_S:.3f}", "step": f"{window_s}s"}
                size += len(session.get(f"{source.base_url}/api/v1/query_range",
                                        params=params, timeout=600).content)
    return time.perf_counter() - began, size


def agent_rate(*, gpus: int, windows: int, start: datetime) -> tuple[int, float]:
    """Samples stored and CPU seconds for the same samples through the agent endpoint."""
    from django.test import Client

    from gpuquota.ingest.services import cluster_ensure, node_enrol

    cluster = cluster_ensure(name="agents")
    client, stored, cpu = Client(), 0, 0.0
    for node_index in range(gpus // PER_NODE):
        issued = node_enrol(cluster=cluster, hostname=f"agent-{node_index}", actor=None)
        uuids = [f"GPU-{uuid.uuid4()}" for _ in range(PER_NODE)]
        for first in range(0, windows, 600 // PER_NODE):
            samples = []
            for w in range(first, min(windows, first + 600 // PER_NODE)):
                ws = start + timedelta(minutes=w)
                for gpu in uuids:
                    samples.append({"gpu_uuid": gpu, "window_start": f"{ws:%Y-%m-%dT%H:%M:%SZ}",
                                    "window_end": f"{ws + timedelta(minutes=1):%Y-%m-%dT%H:%M:%SZ}",
                                    "readings": 2, "util_gpu_avg": 50.0, "util_gpu_max": 50.0,
                                    "memory_used_bytes_avg": 2**30,
                                    "memory_used_bytes_max": 2**30, "power_w_avg": 300.0,
                                    "energy_j": 18000.0})
            body = {"schema_version": 1, "batch_id": str(uuid.uuid4()),
                    "agent_instance_id": str(uuid.uuid4()),
                    "sent_at": f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}",
                    "node": {"hostname": issued.node.hostname},
                    "gpus": [{"uuid": g, "name": "NVIDIA H100 80GB HBM3"} for g in uuids],
                    "samples": samples}
            data = json.dumps(body).encode()
            began = time.process_time()
            answer = client.post("/api/v1/agent/batches", data=data,
                                 content_type="application/json",
                                 HTTP_AUTHORIZATION=f"Bearer {issued.key}")
            cpu += time.process_time() - began
            assert answer.status_code == 202, answer.content[:300]
            stored += answer.json()["samples"]["stored"]
    return stored, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default="gq_bench_telemetry")
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--step", type=int, default=30, help="seconds between readings")
    parser.add_argument("--agent-gpus", type=int, default=64)
    args = parser.parse_args()
    if not (shutil.which("prometheus") and shutil.which("promtool")):
        raise SystemExit("needs Debian's prometheus and promtool (apt-get install prometheus)")

    database_create(args.database)
    os.environ.update(env_for(args.database))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    import django

    django.setup()
    from gpuquota.ingest.partitions import partitions_ensure
    from gpuquota.ingest.services import cluster_ensure
    from gpuquota.telemetry.importer import range_import
    from gpuquota.telemetry.models import TelemetrySource

    now = int(time.time())
    start_s = now - now % 86400 - 2 * 86400  # two days ago, a whole UTC day
    seconds = args.hours * 3600
    start = datetime.fromtimestamp(start_s, UTC)
    end = start + timedelta(seconds=seconds)
    partitions_ensure(days={(start + timedelta(days=d)).date()
                            for d in range(args.hours // 24 + 2)})
    workdir = Path(tempfile.mkdtemp(prefix="gq-bench-telemetry-"))
    try:
        began = time.perf_counter()
        lines = history_write(workdir / "history.om", uuids=gpu_uuids(args.gpus),
                              start=start_s, seconds=seconds, step=args.step)
        written = time.perf_counter() - began
        began = time.perf_counter()
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                        str(workdir / "history.om"), str(workdir / "data")], check=True,
                       capture_output=True)
        print(f"history: {args.gpus} GPUs x {args.hours} h every {args.step} s: {lines:,} "
              f"lines written in {written:.1f} s, blocks in {time.perf_counter() - began:.1f} s")
        process, url = prometheus_start(workdir, workdir / "data")
        try:
            source = TelemetrySource.objects.create(
                name="bench", cluster=cluster_ensure(name="bench"), kind="prometheus",
                base_url=url, window_s=60, scrape_interval_s=args.step)
            prometheus_alone(source, start=start, end=start + timedelta(hours=1))  # warm
            prom_wall, size = prometheus_alone(source, start=start, end=end)
            wall_began, cpu_began = time.perf_counter(), time.process_time()
            result = range_import(source=source, start=start, end=end)
            wall = time.perf_counter() - wall_began
            cpu = time.process_time() - cpu_began
        finally:
            process.terminate()
            process.wait()
        stored = result.counts["samples"]["stored"]
        agent_stored, agent_cpu = agent_rate(gpus=args.agent_gpus, windows=120, start=start)
        print(f"prometheus alone: {prom_wall:.1f} s wall for the importer's queries "
              f"({size / 1e6:.0f} MB of answers)")
        print(f"import: {wall:.1f} s wall, {cpu:.1f} s CPU (this process); {stored:,} samples, "
              f"{result.counts['processes']['stored']:,} process records stored, "
              f"{result.rejected} rejected")
        phases, cpus = result.phases_s, result.phases_cpu_s
        print("import phases, wall (CPU of this process): " + ", ".join(
            f"{name} {phases[name]:.1f} s ({cpus[name]:.1f} s)"
            for name in ("read", "normalise", "store")))
        print(f"overhead: import wall / prometheus wall = {wall / prom_wall:.2f}x; reading and "
              f"normalising alone: {(phases['read'] + phases['normalise']) / prom_wall:.2f}x "
              f"wall, {(cpus['read'] + cpus['normalise']) / prom_wall:.2f}x in CPU seconds")
        print(f"samples per CPU-second: import {stored / cpu:,.0f}; agent endpoint "
              f"{agent_stored / agent_cpu:,.0f} ({agent_stored:,} samples); ratio "
              f"{(stored / cpu) / (agent_stored / agent_cpu):.2f}")
        per_day_1000 = wall * (1000 / args.gpus) * (24 / args.hours)
        print(f"a day of 1,000 GPUs, scaled linearly from this run: {per_day_1000 / 60:.1f} min")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
