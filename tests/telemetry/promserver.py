"""Debian's Prometheus for the tests: started on a loopback port over a data directory
(optionally back-filled by `promtool tsdb create-blocks-from openmetrics`), scraping
whatever targets the test names, stopped at the end."""

import shutil
import socket
import subprocess
import time
from pathlib import Path

import requests

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def backfill(data_dir: Path, openmetrics: str) -> None:
    """Write history into `data_dir` as TSDB blocks (timestamps in seconds, `# EOF` last)."""
    source = data_dir.parent / "history.om"
    source.write_text(openmetrics)
    subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source),
                    str(data_dir)], check=True, capture_output=True, timeout=600)


class Prometheus:
    def __init__(self, workdir: Path, *, targets: list[str] = (), scrape_interval_s: int = 1):
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        scrape = ""
        if targets:
            listed = ", ".join(f'"{t}"' for t in targets)
            scrape = (f"scrape_configs:\n  - job_name: dcgm\n    honor_labels: true\n"
                      f"    scrape_interval: {scrape_interval_s}s\n"
                      f"    scrape_timeout: {scrape_interval_s}s\n"
                      f"    static_configs:\n      - targets: [{listed}]\n")
        (workdir / "prometheus.yml").write_text(
            f"global:\n  scrape_interval: {scrape_interval_s}s\n{scrape}")
        self.process = None

    def start(self) -> "Prometheus":
        self.log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.data_dir}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--storage.tsdb.retention.time=3650d", "--query.lookback-delta=5m"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError((self.workdir / "prometheus.log").read_text()[-2000:])

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if getattr(self, "log", None):
            self.log.close()
