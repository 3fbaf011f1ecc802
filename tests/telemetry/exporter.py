"""A fake dcgm-exporter: exposition text as the real one writes it, in the variants its
releases and the Prometheus in front of them emit (dcgm-exporter's template, its
transformation/kubernetes.go and hpc.go, etc/default-counters.csv):

- `UUID` or `uuid`, `Hostname` or `hostname`, `modelName`, `pci_bus_id`, `device`;
- MIG instances with `GPU_I_PROFILE`/`GPU_I_ID` on series of the parent's UUID, repeating
  the device-level fields; some releases print DCGM_FI_DEV_GPU_UTIL (0) on them too;
- pod labels `namespace`/`pod`/`container`, the old `pod_namespace`/`pod_name`/
  `container_name`, or, scraped by a Prometheus without `honor_labels`, `exported_*`
  beside the exporter's own `namespace`/`pod`/`container`; one pod per device, or
  (`--kubernetes-virtual-gpus`) one series per pod sharing it, with `vgpu`;
- `hpc_job`, one series per job a GPU's mapping file lists;
- the default field set (no ECC volatile counters, no ROW_REMAP_PENDING; remapped rows and
  ROW_REMAP_FAILURE) or one with the ECC fields; with or without profiling fields;
served over HTTP from a function of the time."""

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
    pods: tuple = ()  # several (namespace, pod, container) sharing it: virtual GPUs
    pod_labels: str = "current"  # "old" (pod_namespace...), "exported" (no honor_labels)
    hpc_jobs: tuple[str, ...] = ()  # several jobs in its mapping file
    mig_pods: dict = field(default_factory=dict)  # GPU_I_ID -> (namespace, pod, container)
    mig_gpu_util: bool = False  # a release that prints DCGM_FI_DEV_GPU_UTIL 0 on MIG
    fields: str = "ecc"  # "default": dcgm-exporter's default-counters.csv
    target_labels: tuple[str, ...] = ()  # added by Prometheus's scrape config: 'k="v"'


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
    unc_remapped: int = 0
    remap_failure: int = 0
    instance_util: dict = field(default_factory=dict)  # GPU_I_ID -> percent (else `util`)


POD_LABELS = {"current": ("namespace", "pod", "container"),
              "old": ("pod_namespace", "pod_name", "container_name"),
              "exported": ("exported_namespace", "exported_pod", "exported_container")}


def _workloads(gpu: Gpu, instance: str | None) -> list[list[str]]:
    """The workload labels of each series one field of the GPU (or instance) gets."""
    pods = [gpu.mig_pods[instance]] if instance in gpu.mig_pods else \
        list(gpu.pods) or ([gpu.pod] if gpu.pod and instance is None else [])
    names = POD_LABELS[gpu.pod_labels]
    own = ['container="nvidia-dcgm-exporter"', 'namespace="gpu-operator"',
           'pod="nvidia-dcgm-exporter-7xk2p"'] if gpu.pod_labels == "exported" else []
    out = []
    for number, (namespace, pod, container) in enumerate(pods):
        labels = [f'{names[2]}="{container}"', f'{names[0]}="{namespace}"',
                  f'{names[1]}="{pod}"', *own]
        if len(pods) > 1:
            labels.append(f'vgpu="{number}"')
        out.append(labels)
    jobs = list(gpu.hpc_jobs) or ([gpu.hpc_job] if gpu.hpc_job else [])
    out += [[f'hpc_job="{job}"'] for job in jobs]
    return out or ([own] if own else [[]])


def _labels(gpu: Gpu, *, instance: str | None = None, workload: list[str] = ()) -> str:
    parts = [f'gpu="{gpu.index}"', f'{gpu.uuid_label}="{gpu.uuid}"',
             f'pci_bus_id="00000000:{0x3B + gpu.index:02X}:00.0"',
             f'device="nvidia{gpu.index}"', f'modelName="{gpu.model}"']
    if instance is not None:
        parts += ['GPU_I_PROFILE="3g.40gb"', f'GPU_I_ID="{instance}"']
    parts.append(f'{gpu.hostname_label}="{gpu.hostname}"')
    parts.append('DCGM_FI_DRIVER_VERSION="580.65.06"')
    parts += list(workload) + list(gpu.target_labels)
    return "{" + ",".join(parts) + "}"


def series_lines(gpu: Gpu, reading: Reading) -> list[tuple[str, str, float]]:
    """(metric, labels text, value) of one scrape of one GPU."""
    lines = []
    instances = gpu.mig_instances or (None,)
    for instance in instances:
        util = reading.instance_util.get(instance, reading.util)
        for workload in _workloads(gpu, instance):
            labels = _labels(gpu, instance=instance, workload=workload)
            if gpu.prof:
                lines.append(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, util / 100.0))
            if not gpu.mig_instances:
                lines.append(("DCGM_FI_DEV_GPU_UTIL", labels, util))
            elif gpu.mig_gpu_util:
                lines.append(("DCGM_FI_DEV_GPU_UTIL", labels, 0))
            lines.append(("DCGM_FI_DEV_FB_USED", labels, reading.fb_mib / len(instances)))
            # device-level fields, repeated on every MIG instance
            lines.append(("DCGM_FI_DEV_POWER_USAGE", labels,
                          BLANK_INT64 if reading.power_blank else reading.power_w))
            lines.append(("DCGM_FI_DEV_GPU_TEMP", labels, reading.temp_c))
            lines.append(("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels, reading.energy_mj))
            lines.append(("DCGM_FI_DEV_XID_ERRORS", labels, reading.xid))
            if gpu.fields == "default":
                lines.append(("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", labels,
                              reading.unc_remapped))
                lines.append(("DCGM_FI_DEV_ROW_REMAP_FAILURE", labels, reading.remap_failure))
            else:
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
