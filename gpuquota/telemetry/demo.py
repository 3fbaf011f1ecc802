"""The demo's telemetry path: fake dcgm-exporters for one demo cluster's GPUs (one HTTP
server per node, the exporter's text format), Debian's Prometheus scraping them, and a
source reading that Prometheus, so the cluster reports through the importer instead of
gpuquota's agent (`manage.py telemetry_demo`, `make demo-telemetry`)."""

import math
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests
from django.db.models import Q
from django.utils import timezone

from gpuquota.inventory.models import Cluster, Gpu
from gpuquota.reservations.models import Assignment

SCRAPE_INTERVAL_S = 5


@dataclass(frozen=True)
class DemoGpu:
    uuid: str
    index: int
    model: str
    hostname: str
    namespace: str  # "" for a GPU no pod uses


def demo_gpus(*, cluster: Cluster) -> list[DemoGpu]:
    """The cluster's physical GPUs; one reserved now runs a pod of its team's namespace,
    every third other one an on-demand pod of the first team, the rest are idle."""
    now = timezone.now()
    teams = dict(Assignment.objects.filter(
        Q(assigned_until__isnull=True) | Q(assigned_until__gt=now), assigned_from__lte=now,
        gpu__node__cluster=cluster).values_list("gpu_id", "reservation__team__slug"))
    gpus = Gpu.objects.filter(node__cluster=cluster, parent__isnull=True).select_related("node")
    out = []
    for number, gpu in enumerate(gpus.order_by("node__hostname", "index")):
        namespace = teams.get(gpu.id) or ("robotics" if number % 3 == 0 else "")
        out.append(DemoGpu(uuid=gpu.uuid, index=gpu.index or 0, model=gpu.model_name,
                           hostname=gpu.node.hostname, namespace=namespace))
    return out


def exposition(gpus: list[DemoGpu], *, now: float, started: float) -> str:
    lines = {name: [] for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL",
                                   "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
                                   "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                                   "DCGM_FI_DEV_XID_ERRORS")}
    for number, gpu in enumerate(gpus):
        busy = 0.0 if not gpu.namespace else 0.55 + 0.4 * math.sin(now / 120 + number)
        labels = (f'gpu="{gpu.index}",UUID="{gpu.uuid}",device="nvidia{gpu.index}",'
                  f'modelName="{gpu.model}",Hostname="nvidia-dcgm-exporter-{number:03d}"')
        if gpu.namespace:
            labels += (f',container="main",namespace="{gpu.namespace}",'
                       f'pod="{gpu.namespace}-job-{number}"')
        power = 20 + 50 * busy
        values = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": busy, "DCGM_FI_DEV_GPU_UTIL": busy * 100,
                  "DCGM_FI_DEV_FB_USED": 500 + 15000 * busy, "DCGM_FI_DEV_POWER_USAGE": power,
                  "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (now - started) * 45_000 + 1e9,
                  "DCGM_FI_DEV_XID_ERRORS": 31 if number == 1 and now - started > 180 else 0}
        for name, value in values.items():
            lines[name].append(f"{name}{{{labels}}} {value:.3f}")
    return "".join(f"# TYPE {name} gauge\n" + "\n".join(found) + "\n"
                   for name, found in lines.items())


class Exporters:
    """One fake exporter per node, on loopback ports."""

    def __init__(self, gpus: list[DemoGpu]):
        self.started = timezone.now().timestamp()
        self.servers = []
        for hostname in sorted({g.hostname for g in gpus}):
            mine = [g for g in gpus if g.hostname == hostname]
            self.servers.append(self._serve(mine))

    def _serve(self, gpus: list[DemoGpu]) -> ThreadingHTTPServer:
        started = self.started

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                body = exposition(gpus, now=timezone.now().timestamp(), started=started).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    @property
    def targets(self) -> list[str]:
        return [f"127.0.0.1:{s.server_address[1]}" for s in self.servers]

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


class PrometheusProcess:
    """Debian's Prometheus scraping `targets`, in a temporary directory."""

    def __init__(self, targets: list[str]):
        if not shutil.which("prometheus"):
            raise RuntimeError("needs Debian's prometheus: apt-get install prometheus")
        self.workdir = Path(tempfile.mkdtemp(prefix="gq-demo-prometheus-"))
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        listed = ", ".join(f'"{t}"' for t in targets)
        (self.workdir / "prometheus.yml").write_text(
            f"global:\n  scrape_interval: {SCRAPE_INTERVAL_S}s\nscrape_configs:\n"
            f"  - job_name: dcgm-exporter\n    honor_labels: true\n"
            f"    static_configs:\n      - targets: [{listed}]\n")
        self.process = subprocess.Popen(
            ["prometheus", f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(150):
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("Prometheus did not start")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)
