"""Telemetry import benchmark: back-fills from Debian's Prometheus, each against the time
Prometheus itself takes to answer the same queries, at several fleet sizes in one run.

    .venv/bin/python -m bench.telemetry_import [--sizes 200,1000] [--hours 24] [--step 30]
        [--data DIR] [--profile FILE] [--pulls N [--interval 60] [--sources K]]

(`--data`: keep the loaded history in DIR and reuse it; `--profile`: a CPU-time cProfile
of each import, to FILE.<size>; `--pulls`: steady pulls instead of a back-fill, each size
split into `--sources` sources of its own cluster, pulled in turn.)

It writes `--hours` of dcgm-exporter history for the largest size (8 GPUs a node, a
reading every `--step` seconds: utilization from the profiling field, memory, power,
energy, XID; a pod on every other GPU; a label `g` = GPU index // 100 so a selector picks
the first N) as OpenMetrics, loads it with `promtool tsdb create-blocks-from openmetrics`
(`--jobs` files at once), starts Prometheus on a loopback port, then for each size, in a
process of its own with a database of its own:

1. prometheus: the importer's very queries (`query_range` of every figure, the same
   parameters and chunks, and its reading-times queries), sent with `requests` and read to
   the last byte, nothing parsed: Prometheus's own answer time for the same ranges; then
   the same with each figure's plain `*_over_time` query (Prometheus's CPU for them: the
   figures' cost before counts and maxima were asked only where they say something);
2. import: `telemetry_import`'s service over the whole range (read, normalise, store
   through the agent's ingestion, registering the GPUs): wall and CPU seconds of that
   process (PostgreSQL's CPU is not in them);

and prints, per size, `RESULT telemetry_import gpus=<n> hours=<h> prometheus_s=<wall>
import_wall_s=<wall> import_cpu_s=<cpu> overhead_cpu=<import CPU / prometheus CPU>
overhead_cpu_plain=<import CPU / prometheus CPU for the plain queries>
overhead_wall=<import wall / prometheus wall> samples=<stored>` (and a few more figures).
The largest size's import wall time is the back-fill time of that fleet and day. It is
not a test. Needs
PostgreSQL on 127.0.0.1:5432 and Debian's prometheus/promtool.
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
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.ingest import database_create, env_for  # noqa: E402

PER_NODE = 8
START = datetime(2026, 11, 2, tzinfo=UTC)  # a fixed, whole UTC day


def gpu_uuids(count: int) -> list[str]:
    return [f"GPU-{uuid.UUID(int=index + 1)}" for index in range(count)]


def history_write(path: Path, *, uuids: list[str], first: int, start: int, seconds: int,
                  step: int) -> int:
    """OpenMetrics history of uuids[first:]; returns the number of lines."""
    families = {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": lambda i, t: ((t // 60 + i) % 100) / 100,
        "DCGM_FI_DEV_FB_USED": lambda i, t: 1000 + (t // 60) % 500,
        "DCGM_FI_DEV_POWER_USAGE": lambda i, t: 300,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": lambda i, t: (t - start) * 300_000,
        "DCGM_FI_DEV_XID_ERRORS": lambda i, t: 0,
    }
    labels = []
    for index, gpu in enumerate(uuids[first:], start=first):
        pod = (f',namespace="team-{index % 7}",pod="job-{index}",container="main"'
               if index % 2 == 0 else "")
        labels.append((index, f'{{gpu="{index % PER_NODE}",UUID="{gpu}",'
                              f'device="nvidia{index % 8}",modelName="NVIDIA H100 80GB HBM3",'
                              f'Hostname="node-{index // 8:04d}",g="{index // 100}"{pod}}}'))
    lines = 0
    with path.open("w") as out:
        for metric, value in families.items():
            out.write(f"# TYPE {metric} gauge\n")
            for index, label in labels:
                rows = [f"{metric}{label} {value(index, t):g} {t}\n"
                        for t in range(start, start + seconds, step)]
                out.writelines(rows)
                lines += len(rows)
        out.write("# EOF\n")
    return lines


def blocks_write(workdir: Path, *, data: Path, gpus: int, seconds: int, step: int,
                 jobs: int) -> int:
    """The history as TSDB blocks, `jobs` files written and loaded at once."""
    uuids = gpu_uuids(gpus)
    start = int(START.timestamp())
    share = -(-gpus // jobs)

    def one(part: int) -> int:
        path = workdir / f"history-{part}.om"
        lines = history_write(path, uuids=uuids[:min(gpus, (part + 1) * share)],
                              first=part * share, start=start, seconds=seconds, step=step)
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(path),
                        str(data)], check=True, capture_output=True)
        path.unlink()
        return lines

    with ThreadPoolExecutor(jobs) as pool:
        return sum(pool.map(one, range(jobs)))


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
    for _ in range(600):
        try:
            if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return process, url
        except requests.RequestException:
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit("prometheus did not start")


def prometheus_alone(source, *, start: datetime, end: datetime, plain: bool = False
                     ) -> tuple[float, int]:
    """Wall seconds and bytes of the importer's queries, answered and read, not parsed:
    every figure over each chunk (one window before it and one after) and the reading
    times of the first and the last window (where the fleet starts and stops); with
    `plain`, each figure's plain `*_over_time` query instead (what Prometheus spent on the
    importer's queries before counts and maxima were asked only where they say something)."""
    import requests

    from gpuquota.telemetry import conf
    from gpuquota.telemetry.fields import DEV_UTIL, FIGURES, PROF_UTIL
    from gpuquota.telemetry.prometheus import EPSILON_S, figure_query

    window_s = source.window_s
    first, stop = int(start.timestamp()), int(end.timestamp())
    chunk_s = max(window_s, conf.CHUNK_S - conf.CHUNK_S % window_s)
    selector = source.selector
    readings = max(1, -(-window_s // source.scrape_interval_s))  # as window_figures asks
    size, began = 0, time.perf_counter()
    with requests.Session() as session:
        for chunk in range(first, stop, chunk_s):
            chunk_first = chunk - window_s
            chunk_stop = min(stop, chunk + chunk_s) + window_s
            for figure in FIGURES:
                query = figure_query(figure, selector=selector, window_s=window_s,
                                     readings=readings)
                if plain:
                    query = f"{figure.fn}({figure.metric}{{{selector}}}[{window_s}s])"
                    query = f"{query} > 0" if figure.fn == "resets" else query
                params = {"query": query,
                          "start": f"{chunk_first + window_s - EPSILON_S:.3f}",
                          "end": f"{chunk_stop - EPSILON_S:.3f}", "step": f"{window_s}s"}
                size += len(session.get(f"{source.base_url}/api/v1/query_range",
                                        params=params, timeout=600).content)
        for ws in (first, stop - window_s):
            query = f'{{__name__=~"{PROF_UTIL}|{DEV_UTIL}",{selector}}}[{window_s}s]'
            size += len(session.get(f"{source.base_url}/api/v1/query", params={
                "query": query, "time": f"{ws + window_s - EPSILON_S:.3f}"}, timeout=600).content)
    return time.perf_counter() - began, size


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pulls_measure(source, *, pid: int, pulls: int) -> dict:
    """`pulls` steady pulls of the source's interval each (after one that registers the
    GPUs), as the beat makes them: means per pull of the worker's, its PostgreSQL backend's
    and Prometheus's CPU seconds."""
    from bench.table_stats import pg_cpu_s
    from gpuquota.telemetry.models import TelemetrySource
    from gpuquota.telemetry.services import source_pull

    interval = timedelta(seconds=source.interval_s)
    source.cursor = START + timedelta(minutes=5)
    source.save(update_fields=["cursor"])
    # Each pull imports [cursor, cursor + interval): its `now` is a window past that end.
    now = source.cursor + interval + timedelta(seconds=source.window_s + source.delay_s)
    totals = {"cpu_s": 0.0, "pg_cpu_s": 0.0, "prometheus_cpu_s": 0.0, "wall_s": 0.0,
              "samples": 0, "duplicates": 0}
    for n in range(pulls + 1):
        prom, pg = process_cpu_s(pid), pg_cpu_s()
        wall, cpu = time.perf_counter(), time.process_time()
        # as the task does: the source read afresh (its cursor where the last pull ended)
        source = TelemetrySource.objects.get(pk=source.pk)
        result = source_pull(source=source, now=now + n * interval)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if result is None:
            source.refresh_from_db()
            raise SystemExit(f"pull failed: {source.last_error}")
        if n:  # the first registers the GPUs
            totals["cpu_s"] += cpu
            totals["wall_s"] += wall
            totals["pg_cpu_s"] += pg_cpu_s() - pg
            totals["prometheus_cpu_s"] += process_cpu_s(pid) - prom
            totals["samples"] += result.counts["samples"]["stored"]
            totals["duplicates"] += result.counts["samples"]["duplicates"]
    return {k: v / pulls for k, v in totals.items()}


def measure(size: int, url: str, pid: int, hours: int, step: int, database: str,
            profile: str = "", pulls: int = 0, interval_s: int = 60, sources: int = 1) -> dict:
    """One size, in this process with its own database: Prometheus alone, then the import
    (or, with `pulls`, the steady pulls of `sources` sources that share the GPUs)."""
    database_create(database)
    os.environ.update(env_for(database))
    os.environ["TELEMETRY_ALLOWED_NETWORKS"] = "127.0.0.1/32"  # its Prometheus is on loopback
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    import django

    django.setup()
    from gpuquota.ingest.services import cluster_ensure
    from gpuquota.telemetry.importer import range_import
    from gpuquota.telemetry.models import TelemetrySource

    end = START + timedelta(hours=hours)
    if pulls:
        per = size // sources
        found = []
        for k in range(sources):  # each its own cluster and GPUs, pulled in turn
            groups = "|".join(str(g) for g in range(k * per // 100, -(-(k + 1) * per // 100)))
            source = TelemetrySource.objects.create(
                name=f"bench-{k}", cluster=cluster_ensure(name=f"bench-{k}"), kind="prometheus",
                base_url=url, selector=f'g=~"{groups}"', window_s=60, scrape_interval_s=step,
                interval_s=interval_s)
            found.append({"gpus": per, "interval_s": interval_s,
                          **pulls_measure(source, pid=pid, pulls=pulls)})
        return found[0] if sources == 1 else {"gpus": size, "sources": found}
    groups = "|".join(str(g) for g in range(-(-size // 100)))
    source = TelemetrySource.objects.create(
        name="bench", cluster=cluster_ensure(name="bench"), kind="prometheus", base_url=url,
        selector=f'g=~"{groups}"', window_s=60, scrape_interval_s=step, interval_s=interval_s)
    prometheus_alone(source, start=START, end=START + timedelta(hours=1))  # warm
    prom_cpu = process_cpu_s(pid)
    prom_wall, answered = prometheus_alone(source, start=START, end=end)
    prom_cpu = process_cpu_s(pid) - prom_cpu
    plain_cpu = process_cpu_s(pid)
    prometheus_alone(source, start=START, end=end, plain=True)
    plain_cpu = process_cpu_s(pid) - plain_cpu
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)  # CPU, not wall: a shared machine
        profiler.enable()
    wall_began, cpu_began = time.perf_counter(), time.process_time()
    result = range_import(source=source, start=START, end=end)
    wall, cpu = time.perf_counter() - wall_began, time.process_time() - cpu_began
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(f"{profile}.{size}")
    return {"gpus": size, "hours": hours, "prometheus_s": prom_wall, "prometheus_cpu_s": prom_cpu,
            "prometheus_plain_cpu_s": plain_cpu,
            "answer_mb": answered / 1e6,
            "import_wall_s": wall, "import_cpu_s": cpu,
            "samples": result.counts["samples"]["stored"],
            "processes": result.counts["processes"]["stored"], "rejected": result.rejected,
            "phases_s": result.phases_s, "phases_cpu_s": result.phases_cpu_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default="gq_bench_telemetry")
    parser.add_argument("--sizes", default="200,1000", help="GPUs, comma-separated")
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--step", type=int, default=30, help="seconds between readings")
    parser.add_argument("--jobs", type=int, default=2, help="promtool processes at once")
    parser.add_argument("--data", help="a TSDB folder to keep and reuse (written when new)")
    parser.add_argument("--profile", default="",
                        help="cProfile each import to <this>.<size> (CPU figures inflate)")
    parser.add_argument("--pulls", type=int, default=0,
                        help="measure this many steady pulls per size instead of a back-fill")
    parser.add_argument("--interval", type=int, default=60,
                        help="with --pulls: the source's interval_s (how often it pulls)")
    parser.add_argument("--sources", type=int, default=1,
                        help="with --pulls: split each size into this many sources (clusters), "
                             "each pulled in turn and reported on its own")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # size,url: the child process
    args = parser.parse_args()
    if args.measure:
        size, pid, url = args.measure.split(",", 2)
        print(json.dumps(measure(int(size), url, int(pid), args.hours, args.step,
                                 f"{args.database}_{size}", args.profile, args.pulls,
                                 args.interval, args.sources)))
        return
    if not (shutil.which("prometheus") and shutil.which("promtool")):
        raise SystemExit("needs Debian's prometheus and promtool (apt-get install prometheus)")
    sizes = sorted(int(s) for s in args.sizes.split(","))
    workdir = Path(tempfile.mkdtemp(prefix="gq-bench-telemetry-"))
    data = Path(args.data).resolve() if args.data else workdir / "data"
    try:
        began = time.perf_counter()
        if (data / "done").exists():
            print(f"history: reused {data}")
        else:
            lines = blocks_write(workdir, data=data, gpus=sizes[-1], seconds=args.hours * 3600,
                                 step=args.step, jobs=args.jobs)
            (data / "done").write_text(f"{sizes[-1]} {args.hours} {args.step}\n")
            print(f"history: {sizes[-1]} GPUs x {args.hours} h every {args.step} s: {lines:,} "
                  f"lines, written and loaded in {time.perf_counter() - began:.0f} s")
        process, url = prometheus_start(workdir, data)
        try:
            for size in sizes:
                child = subprocess.run(
                    [sys.executable, "-m", "bench.telemetry_import", "--measure",
                     f"{size},{process.pid},{url}", "--hours", str(args.hours),
                     "--step", str(args.step), "--database", args.database,
                     "--profile", args.profile, "--pulls", str(args.pulls),
                     "--interval", str(args.interval), "--sources", str(args.sources)], cwd=ROOT,
                    check=True, capture_output=True, text=True)
                found = json.loads(child.stdout.strip().splitlines()[-1])
                (_pulls_report if args.pulls else _report)(found)
        finally:
            process.terminate()
            process.wait()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _pulls_report(r: dict) -> None:
    if "sources" in r:
        for number, one in enumerate(r["sources"]):
            print(f"source {number}: ", end="")
            _pulls_report(one)
        shares = [(s["cpu_s"] + s["pg_cpu_s"]) / s["interval_s"] for s in r["sources"]]
        print(f"RESULT telemetry_pull_fleet gpus={r['gpus']} sources={len(shares)} "
              f"period_share_sum={sum(shares):.4f} period_share_max={max(shares):.4f} "
              f"load={os.getloadavg()[0]:.1f}", flush=True)
        return
    share = (r["cpu_s"] + r["pg_cpu_s"]) / r["interval_s"]
    print(f"RESULT telemetry_pull gpus={r['gpus']} interval_s={r['interval_s']} "
          f"wall_s={r['wall_s']:.3f} cpu_s={r['cpu_s']:.3f} pg_cpu_s={r['pg_cpu_s']:.3f} "
          f"prometheus_cpu_s={r['prometheus_cpu_s']:.3f} samples={r['samples']:.0f} "
          f"duplicates={r.get('duplicates', 0):.0f} "
          f"period_share={share:.5f} load={os.getloadavg()[0]:.1f}", flush=True)


def _report(r: dict) -> None:
    phases, cpus = r["phases_s"], r["phases_cpu_s"]
    print(f"{r['gpus']} GPUs x {r['hours']} h: prometheus alone {r['prometheus_s']:.1f} s "
          f"wall, {r['prometheus_cpu_s']:.1f} s CPU ({r['answer_mb']:.0f} MB); import "
          f"{r['import_wall_s']:.1f} s wall, "
          f"{r['import_cpu_s']:.1f} s CPU; {r['samples']:,} samples, {r['processes']:,} "
          f"process records, {r['rejected']} rejected; phases wall (CPU): " + ", ".join(
              f"{name} {phases[name]:.1f} s ({cpus[name]:.1f} s)"
              for name in ("read", "normalise", "store")))
    read_normalise = cpus["read"] + cpus["normalise"]
    print(f"RESULT telemetry_import gpus={r['gpus']} hours={r['hours']} "
          f"prometheus_wall_s={r['prometheus_s']:.1f} "
          f"prometheus_cpu_s={r['prometheus_cpu_s']:.1f} "
          f"import_wall_s={r['import_wall_s']:.1f} import_cpu_s={r['import_cpu_s']:.1f} "
          f"read_normalise_cpu_s={read_normalise:.1f} "
          f"overhead_cpu={r['import_cpu_s'] / r['prometheus_cpu_s']:.2f} "
          f"prometheus_plain_cpu_s={r['prometheus_plain_cpu_s']:.1f} "
          f"overhead_cpu_plain={r['import_cpu_s'] / r['prometheus_plain_cpu_s']:.2f} "
          f"overhead_read_normalise_cpu={read_normalise / r['prometheus_cpu_s']:.2f} "
          f"overhead_wall={r['import_wall_s'] / r['prometheus_s']:.2f} samples={r['samples']}")


if __name__ == "__main__":
    main()
