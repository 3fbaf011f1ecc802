"""A fake dcgm-exporter: exposition text as the real one writes it (dcgm-exporter's
README and issues: `UUID` and `uuid`, `Hostname` and `hostname`, `modelName`,
`pci_bus_id`, MIG instances with `GPU_I_ID`/`GPU_I_PROFILE` repeating the device-level
fields, pod labels or none), served over HTTP from a function of the time."""

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BLANK_INT64 = 9223372036854775794  # DCGM_FT_INT64_BLANK


@dataclass
class Gpu:
    uuid: str
    index: int = 0
    model: str = "NVIDIA H100 80GB HBM3"
    hostname: str = "gpu-node-01"
    uuid_label: str = "UUID"
    hostname_label: str = "Hostname"
    pod: tuple[str, str, str] | None = None  # namespace, pod, container
    hpc_job: str | None = None
    mig_instances: tuple[str, ...] = ()  # GPU_I_ID values: MIG mode
    prof: bool = True  # DCGM_FI_PROF_GR_ENGINE_ACTIVE present


@dataclass
class Reading:
    util: float  # percent
    fb_mib: float = 1024.0
    power_w: float = 300.0
    temp_c: float = 60.0
    energy_mj: float = 0.0
    xid: int = 0
    dbe: int = 0
    sbe: int = 0
    remap_pending: int = 0
    power_blank: bool = False


def _labels(gpu: Gpu, *, instance: str | None = None) -> str:
    parts = [f'gpu="{gpu.index}"', f'{gpu.uuid_label}="{gpu.uuid}"',
             f'pci_bus_id="00000000:{0x3B + gpu.index:02X}:00.0"',
             f'device="nvidia{gpu.index}"', f'modelName="{gpu.model}"']
    if instance is not None:
        parts += ['GPU_I_PROFILE="3g.40gb"', f'GPU_I_ID="{instance}"']
    parts.append(f'{gpu.hostname_label}="{gpu.hostname}"')
    parts.append('DCGM_FI_DRIVER_VERSION="580.65.06"')
    if gpu.pod:
        namespace, pod, container = gpu.pod
        parts += [f'container="{container}"', f'namespace="{namespace}"', f'pod="{pod}"']
    if gpu.hpc_job:
        parts.append(f'hpc_job="{gpu.hpc_job}"')
    return "{" + ",".join(parts) + "}"


def series_lines(gpu: Gpu, reading: Reading) -> list[tuple[str, str, float]]:
    """(metric, labels text, value) of one scrape of one GPU."""
    lines = []
    instances = gpu.mig_instances or (None,)
    for instance in instances:
        labels = _labels(gpu, instance=instance)
        if gpu.prof:
            lines.append(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, reading.util / 100.0))
        if not gpu.mig_instances:
            lines.append(("DCGM_FI_DEV_GPU_UTIL", labels, reading.util))
        lines.append(("DCGM_FI_DEV_FB_USED", labels, reading.fb_mib / len(instances)))
        # device-level fields, repeated on every MIG instance
        lines.append(("DCGM_FI_DEV_POWER_USAGE", labels,
                      BLANK_INT64 if reading.power_blank else reading.power_w))
        lines.append(("DCGM_FI_DEV_GPU_TEMP", labels, reading.temp_c))
        lines.append(("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels, reading.energy_mj))
        lines.append(("DCGM_FI_DEV_XID_ERRORS", labels, reading.xid))
        lines.append(("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", labels, reading.dbe))
        lines.append(("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", labels, reading.sbe))
        lines.append(("DCGM_FI_DEV_ROW_REMAP_PENDING", labels, reading.remap_pending))
    return lines


def exposition(readings: list[tuple[Gpu, Reading]]) -> str:
    """The /metrics text of one scrape."""
    by_metric: dict[str, list[str]] = {}
    for gpu, reading in readings:
        for metric, labels, value in series_lines(gpu, reading):
            by_metric.setdefault(metric, []).append(f"{metric}{labels} {value:g}")
    out = []
    for metric, lines in by_metric.items():
        kind = "counter" if metric.endswith(("CONSUMPTION", "TOTAL")) else "gauge"
        out += [f"# HELP {metric} {metric}.", f"# TYPE {metric} {kind}", *lines]
    return "\n".join(out) + "\n"


def openmetrics(points: list[tuple[int, list[tuple[Gpu, Reading]]]]) -> str:
    """History for `promtool tsdb create-blocks-from openmetrics`: one line per series and
    instant (seconds), metric families kept together as OpenMetrics wants."""
    by_metric: dict[str, list[str]] = {}
    for at, readings in points:
        for gpu, reading in readings:
            for metric, labels, value in series_lines(gpu, reading):
                by_metric.setdefault(metric, []).append(f"{metric}{labels} {value:g} {at}")
    out = []
    for metric, lines in by_metric.items():
        out += [f"# TYPE {metric} gauge", *lines]
    return "\n".join(out) + "\n# EOF\n"


@dataclass
class FakeExporter:
    """Serves `state()` (a list of (Gpu, Reading)) at /metrics; `status` forces an error."""

    state: object
    status: int = 200
    authorization: str | None = None  # the Authorization header it requires, if any
    server: ThreadingHTTPServer | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "FakeExporter":
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                status = exporter.status
                if exporter.authorization and \
                        self.headers.get("Authorization") != exporter.authorization:
                    status = 401
                body = exposition(exporter.state()).encode() if status == 200 \
                    else b"exporter broken"
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()
