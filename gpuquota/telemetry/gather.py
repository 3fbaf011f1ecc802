"""The window figures of a read (`prometheus.WindowTable`) gathered per GPU, per MIG
instance and per series, as `normalise` needs them; and what the source's series showed
(the variant of dcgm-exporter it is, for the pages)."""

from collections import defaultdict
from dataclasses import dataclass, field

from gpuquota.telemetry.fields import DEV_UTIL, FIGURES
from gpuquota.telemetry.labels import gpu_uuid, mig_instance, node_key, workload
from gpuquota.telemetry.prometheus import WindowTable

DEVICE_LEVEL = {figure.name for figure in FIGURES if figure.device_level}
METRIC_OF = {figure.name: figure.metric for figure in FIGURES}
DEV_UTIL_FIGURES = {figure.name for figure in FIGURES if figure.metric == DEV_UTIL}


@dataclass
class Series:
    """One series of an instance (a label set: its pod or job, if any) and its figures."""

    work: tuple | None  # (job, container) of the workload it names
    figures: dict = field(default_factory=dict)  # figure name -> {window start: value}


@dataclass
class Instance:
    """A whole GPU ("") or one MIG instance (its GPU_I_ID) and its series."""

    key: str
    profile: str = ""
    series: dict = field(default_factory=dict)  # label key -> Series


@dataclass
class GatheredGpu:
    """Everything read about one physical GPU."""

    uuid: str
    labels: dict = field(default_factory=dict)
    node: str = ""
    device: dict = field(default_factory=lambda: defaultdict(dict))
    xid_counts: dict = field(default_factory=dict)  # xid -> {window start: value}
    instances: dict = field(default_factory=dict)  # instance key -> Instance
    present: set = field(default_factory=set)
    mig: bool = False  # it has MIG instances (set once gathered)

    def util_prefix(self) -> str | None:
        """`prof` (DCGM_FI_PROF_GR_ENGINE_ACTIVE) where the GPU has it, else `util`
        (DCGM_FI_DEV_GPU_UTIL) on a whole GPU; None on a MIG GPU without profiling
        metrics: DCGM_FI_DEV_GPU_UTIL is not a MIG instance's figure."""
        for instance in self.instances.values():
            if any("prof_count" in s.figures for s in instance.series.values()):
                return "prof"
        if not self.mig and "" in self.instances and any(
                "util_count" in s.figures for s in self.instances[""].series.values()):
            return "util"
        return None

    def util_instances(self) -> list[Instance]:
        """The instances that carry utilization: the MIG instances, or the whole GPU."""
        return [i for k, i in sorted(self.instances.items()) if bool(k) == self.mig]


@dataclass
class Observed:
    """What a source's series showed: the fields, and the labels naming workloads."""

    metrics: set = field(default_factory=set)
    kubernetes: bool = False
    exported: bool = False  # Prometheus renamed the pod labels exported_*
    shared_pods: bool = False  # a GPU named by more than one pod at once (virtual GPUs)
    hpc_job: bool = False
    mig: bool = False

    def as_json(self) -> dict:
        return {"metrics": sorted(self.metrics), "kubernetes": self.kubernetes,
                "exported": self.exported, "shared_pods": self.shared_pods,
                "hpc_job": self.hpc_job, "mig": self.mig}


def _add(gpu: GatheredGpu, name: str, labels: dict, points: dict, observed: Observed) -> None:
    if not gpu.labels or (workload(gpu.labels) and not workload(labels)):
        gpu.labels = labels
    gpu.present.update(points)
    if name == "xid_count_last":
        xid = labels.get("xid", "")
        if xid.isdigit():
            gpu.xid_counts.setdefault(int(xid), {}).update(points)
        return
    if name in DEVICE_LEVEL:  # repeated on each MIG instance's series: the first kept
        merged = gpu.device[name]
        if not merged:
            merged.update(points)
            return
        for ws, value in points.items():
            merged.setdefault(ws, value)
        return
    key = mig_instance(labels)
    if key and name in DEV_UTIL_FIGURES:
        return  # DCGM_FI_DEV_GPU_UTIL on a MIG instance (0 in some releases): not a figure
    instance = gpu.instances.get(key)
    if instance is None:
        instance = gpu.instances[key] = Instance(key, labels.get("GPU_I_PROFILE", ""))
    label_key = tuple(sorted(labels.items()))
    series = instance.series.get(label_key)
    if series is None:
        series = instance.series[label_key] = Series(workload(labels))
    series.figures.setdefault(name, {}).update(points)


def _observe(observed: Observed, labels: dict, name: str) -> None:
    observed.metrics.add(METRIC_OF[name])
    if labels.get("exported_pod"):
        observed.exported = observed.kubernetes = True
    elif labels.get("pod") or labels.get("pod_name"):
        observed.kubernetes = True
    if labels.get("vgpu"):
        observed.shared_pods = True
    if labels.get("hpc_job"):
        observed.hpc_job = True
    if labels.get("GPU_I_ID"):
        observed.mig = True


def gpus_gather(table: WindowTable, *, node_label: str
                ) -> tuple[dict[str, GatheredGpu], int, Observed]:
    """The table's GPUs by UUID, how many series were skipped (no valid UUID), and what
    the series showed."""
    gpus: dict[str, GatheredGpu] = {}
    skipped: set = set()
    observed = Observed()
    for name, found in table.items():
        for labels, points in found:  # usable figures only (`figure_usable`)
            gpu_id = gpu_uuid(labels)
            if gpu_id is None:
                skipped.add(tuple(sorted(labels.items())))
                continue
            if not points:
                continue
            _observe(observed, labels, name)
            gpu = gpus.get(gpu_id)
            if gpu is None:
                gpu = gpus[gpu_id] = GatheredGpu(gpu_id, node=node_key(labels, node_label))
            _add(gpu, name, labels, points, observed)
    for gpu in gpus.values():
        gpu.mig = any(key for key in gpu.instances)
        _shared(gpu, observed)
    return gpus, len(skipped), observed


def _shared(gpu: GatheredGpu, observed: Observed) -> None:
    """Whether two workloads were read on one instance in one window."""
    if observed.shared_pods:
        return
    for instance in gpu.instances.values():
        seen: dict[int, set] = defaultdict(set)
        for series in instance.series.values():
            if series.work is None:
                continue
            work = repr(series.work)
            for ws in series.figures.get("prof_count") or series.figures.get("util_count") or ():
                seen[ws].add(work)
                if len(seen[ws]) > 1 and series.work[0]["source"] == "kubernetes":
                    observed.shared_pods = True
                    return


def node_mates(gpus: dict[str, GatheredGpu]) -> dict[str, set]:
    """For each GPU, the windows in which another GPU of its node reported."""
    by_node: dict[str, list[GatheredGpu]] = defaultdict(list)
    for gpu in gpus.values():
        by_node[gpu.node].append(gpu)
    mates: dict[str, set] = {}
    for members in by_node.values():
        counts: dict[int, int] = defaultdict(int)
        for gpu in members:
            for ws in gpu.present:
                counts[ws] += 1
        for gpu in members:
            mates[gpu.uuid] = {ws for ws, n in counts.items() if n - (ws in gpu.present) > 0}
    return mates

