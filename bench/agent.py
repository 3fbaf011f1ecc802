"""Agent benchmark: CPU time per sampling pass per GPU, and the agent's resident memory.

Targets: under 1 ms of CPU per GPU per pass, under 50 MB resident. Two backends: the simulator,
and the NVML backend running through the real `pynvml` over the fake libnvidia-ml of
`agent.nvml_fake` (no GPU needed; the C calls cost nothing there, so on a real node add NVML's
own time). Run: `.venv/bin/python bench/agent.py [--gpus 8] [--passes 600]`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)  # this file is bench/agent.py: `import agent` must find the package

from agent.nvml_backend import NvmlBackend  # noqa: E402
from agent.nvml_fake import FakeGpu, FakeNvmlLib, installed  # noqa: E402
from agent.owners import OwnerResolver  # noqa: E402
from agent.runner import Agent  # noqa: E402
from agent.simulator import Simulator  # noqa: E402
from agent.spool import Spool  # noqa: E402

POLL_S = 10
POLLS_PER_WINDOW = 6


class BenchClock:
    """Time that moves by one poll interval per pass."""

    def __init__(self) -> None:
        self.t = 1_795_910_400.0

    def now(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        self.t += seconds
        return stop.is_set()


def measure(agent: Agent, clock: BenchClock, passes: int, advance=lambda: None) -> dict:
    """CPU ms per GPU for one poll, and for closing a window (aggregation, validation, spool)."""
    agent.start()
    poll_cpu = close_cpu = 0.0
    closes = 0
    for n in range(1, passes + 1):
        clock.t += POLL_S
        advance()
        started = time.process_time()
        agent.poll()
        poll_cpu += time.process_time() - started
        if n % POLLS_PER_WINDOW == 0:
            started = time.process_time()
            end = int(clock.t)
            agent.close_window(end - POLL_S * POLLS_PER_WINDOW, end)
            close_cpu += time.process_time() - started
            closes += 1
    devices = len(agent.gpus)
    return {"devices": devices,
            "poll_ms_per_gpu": round(poll_cpu / passes / devices * 1000, 4),
            "window_close_ms_per_gpu": round(close_cpu / max(closes, 1) / devices * 1000, 4)}


def bench_simulator(gpus: int, passes: int, spool_dir: str) -> dict:
    clock = BenchClock()
    sim = Simulator(gpus, seed=1, hostname="bench", clock=clock.now, fail_after_s=10**9)
    agent = Agent(backend=sim, spool=Spool(spool_dir + "/sim", clock=clock.now),
                  owners=OwnerResolver(), hostname="bench", boot_id=None, clock=clock)
    return measure(agent, clock, passes)


def bench_fake_nvml(gpus: int, passes: int, spool_dir: str) -> dict:
    # Every fake GPU runs this very process, so owner lookups read a real /proc entry.
    pid = os.getpid()
    fakes = [FakeGpu(f"GPU-00000000-0000-4000-8000-{n:012d}", memory_used=40 * 2**30,
                     processes=[(pid, 40 * 2**30)]) for n in range(gpus)]
    clock = BenchClock()
    with installed(FakeNvmlLib(fakes)):
        backend = NvmlBackend()
        agent = Agent(backend=backend, spool=Spool(spool_dir + "/nvml", clock=clock.now),
                      owners=OwnerResolver(), hostname="bench", boot_id=None, clock=clock)

        def advance() -> None:
            for fake in fakes:
                fake.advance(POLL_S, 87)

        try:
            return measure(agent, clock, passes, advance)
        finally:
            backend.close()


class Accept(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(202)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


def agent_process_rss_mb(gpus: int, seconds: float, spool_dir: str) -> float:
    """Peak resident memory of a real `python -m agent --simulate` run, sending to a server."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Accept)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = Path(spool_dir, "token")
    token.write_text("bench")
    token.chmod(0o600)
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "--server", f"http://127.0.0.1:{server.server_port}",
         "--token-file", str(token), "--simulate", str(gpus), "--window", "1", "--poll", "0.25",
         "--send-jitter", "0", "--spool-dir", spool_dir + "/proc", "--log-level", "WARNING"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    time.sleep(seconds)
    process.terminate()
    process.wait(30)
    server.shutdown()
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def nvml_import_rss_mb() -> float:
    """Peak resident memory of a process that loads the agent with its NVML backend."""
    code = ("import resource, agent.cli, agent.nvml_backend; "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
    return int(out) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--passes", type=int, default=600)
    parser.add_argument("--rss-seconds", type=float, default=6.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as spool_dir:
        results = {
            "simulator": bench_simulator(args.gpus, args.passes, spool_dir),
            "nvml_through_pynvml_fake_lib": bench_fake_nvml(args.gpus, args.passes, spool_dir),
            "agent_process_peak_rss_mb": round(
                agent_process_rss_mb(args.gpus, args.rss_seconds, spool_dir), 1),
            "agent_with_nvml_loaded_rss_mb": round(nvml_import_rss_mb(), 1),
        }
    print(json.dumps(results, indent=2))
    worst = max(r["poll_ms_per_gpu"] for r in results.values() if isinstance(r, dict))
    ok = worst < 1.0 and max(results["agent_process_peak_rss_mb"],
                             results["agent_with_nvml_loaded_rss_mb"]) < 50
    print(f"targets (<1 ms CPU per GPU per pass, <50 MB resident): {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
