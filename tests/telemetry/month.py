"""One month of a small fleet, told once (`readings_at`, a reading every 10 s) and drawn
two ways: the batches a node agent would send (`agent_batches`) and the history
dcgm-exporter would leave in Prometheus (`openmetrics`), for `test_month_two_paths.py`.

Two clusters, each a variant of dcgm-exporter as real releases print it:
- `k` (Kubernetes, profiling fields): K0 runs vision's pod in vision's reservation and
  falls off the bus (XID 79) at 01:00:20 on 1 November while K1 on its node reports; the
  node reboots at 02:00:30 and is back at 02:10:40, K0 still showing XID 79. K1 is shared
  by a vision and an nlp pod (`--kubernetes-virtual-gpus`), scraped by a Prometheus
  without `honor_labels` (`exported_*`). K2 is a MIG A100 (a release that prints
  DCGM_FI_DEV_GPU_UTIL 0 on its instances) whose instance 1 runs nlp busy and instance 2
  runs speech idle. K3, with the old pod labels, starts 40 s into a window. The episode
  runs over the month's edge (31 October 22:00 to 1 November 03:00).
- `h` (Slurm `hpc_job` labels, no profiling fields, `uuid`/`hostname`, the default field
  set): H0 runs job 1001 (nlp) and remaps a row at 11:00; H1 runs jobs 1002 (vision) and
  1003 (speech) at once; H2 is a MIG A100 without profiling fields, reserved by speech:
  no data, never 0 %."""

import uuid
from datetime import UTC, datetime
from fractions import Fraction

from tests.telemetry.exporter import Gpu, Reading

TICK_S, WINDOW_S, MIB = 10, 60, 1024 * 1024
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
K, H = ('cluster="k"',), ('cluster="h"',)


def at(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


K0 = Gpu(uuid="GPU-0a000000-0000-4000-8000-000000000000", index=0, hostname="k-node-1",
         pod=("vision", "train-0", "pytorch"), target_labels=K)
K1 = Gpu(uuid="GPU-0a000000-0000-4000-8000-000000000001", index=1, hostname="k-node-1",
         pods=(("vision", "eval-1", "eval"), ("nlp", "tok-2", "tok")), pod_labels="exported",
         target_labels=K)
K2 = Gpu(uuid="GPU-0a000000-0000-4000-8000-000000000002", index=0, model=A100,
         hostname="k-node-2", mig_instances=("1", "2"),
         mig_pods={"1": ("nlp", "llm-3", "serve"), "2": ("speech", "asr-4", "asr")},
         mig_gpu_util=True, target_labels=K)
K3 = Gpu(uuid="GPU-0a000000-0000-4000-8000-000000000003", index=0, hostname="k-node-3",
         pod=("speech", "asr-5", "asr"), pod_labels="old", target_labels=K)
HPC = {"uuid_label": "uuid", "hostname_label": "hostname", "prof": False,
       "fields": "default", "hostname": "h-node-1", "target_labels": H}
H0 = Gpu(uuid="GPU-0b000000-0000-4000-8000-000000000000", index=0, hpc_job="1001", **HPC)
H1 = Gpu(uuid="GPU-0b000000-0000-4000-8000-000000000001", index=1, hpc_jobs=("1002", "1003"),
         **HPC)
H2 = Gpu(uuid="GPU-0b000000-0000-4000-8000-000000000002", index=2, model=A100,
         mig_instances=("1", "2"), mig_gpu_util=True, **HPC)
GPUS = (K0, K1, K2, K3, H0, H1, H2)

K_FROM, K_UNTIL = at("2026-10-31T22:00:00"), at("2026-11-01T03:00:00")
K3_FROM = at("2026-10-31T22:00:40")  # 40 s into a window
FAIL_AT = at("2026-11-01T01:00:20")  # K0 falls off the bus
REBOOT_AT = at("2026-11-01T02:00:30")  # k-node-1 goes down...
BACK_AT = at("2026-11-01T02:10:40")  # ...and is back, 40 s into a window
H_FROM, H_UNTIL = at("2026-11-15T10:00:00"), at("2026-11-15T12:00:00")
REMAP_AT = at("2026-11-15T11:00:00")  # H0 remaps a row for an uncorrectable error

# Slurm's accounting of the jobs `hpc_job` names (as `sacct --json` prints them)
JOBS = {"1001": ("nlp", "alice"), "1002": ("vision", "bob"), "1003": ("speech", "carol")}
JOB_START, JOB_END = at("2026-11-15T09:55:00"), at("2026-11-15T12:05:00")

# node -> its agent's runs (from, until, boot id) and GPUs
NODES = {
    "k-node-1": ([(K_FROM, REBOOT_AT, "boot-k1-a"), (BACK_AT, K_UNTIL, "boot-k1-b")],
                 [K0, K1]),
    "k-node-2": ([(K_FROM, K_UNTIL, "boot-k2")], [K2]),
    "k-node-3": ([(K3_FROM, K_UNTIL, "boot-k3")], [K3]),
    "h-node-1": ([(H_FROM, H_UNTIL, "boot-h1")], [H0, H1, H2]),
}


def util_of(gpu: Gpu, tick: int, instance: str | None = None) -> int:
    """Whole percents, varying by the minute, never near the busy threshold (5 %)."""
    minute = tick // 60
    if gpu is K2:
        return 60 + minute % 20 if instance == "1" else 2
    base = {K0.uuid: 55, K1.uuid: 50, K3.uuid: 30, H0.uuid: 70, H1.uuid: 40}.get(gpu.uuid, 0)
    return base + (minute + tick // 10) % 7


def readings_at(tick: int) -> list[tuple[Gpu, Reading]]:
    """What each exporter printed at `tick` (the GPUs that answered)."""
    out = []
    if K_FROM <= tick < K_UNTIL:
        node_up = not REBOOT_AT <= tick < BACK_AT
        if node_up and not FAIL_AT <= tick < BACK_AT:
            out.append((K0, Reading(util=util_of(K0, tick), xid=79 if tick >= BACK_AT else 0,
                                    energy_mj=tick * 300_000.0)))
        if node_up:
            out.append((K1, Reading(util=util_of(K1, tick), energy_mj=tick * 300_000.0)))
        out.append((K2, Reading(util=0, energy_mj=tick * 250_000.0, instance_util={
            i: util_of(K2, tick, i) for i in K2.mig_instances})))
        if tick >= K3_FROM:
            out.append((K3, Reading(util=util_of(K3, tick), energy_mj=tick * 300_000.0)))
    if H_FROM <= tick < H_UNTIL:
        out.append((H0, Reading(util=util_of(H0, tick), energy_mj=tick * 300_000.0,
                                unc_remapped=1 if tick >= REMAP_AT else 0)))
        out.append((H1, Reading(util=util_of(H1, tick), energy_mj=tick * 300_000.0)))
        out.append((H2, Reading(util=0, energy_mj=tick * 250_000.0)))
    return out


def ticks() -> list[int]:
    return [*range(K_FROM, K_UNTIL, TICK_S), *range(H_FROM, H_UNTIL, TICK_S)]


def openmetrics_history() -> str:
    from tests.telemetry.exporter import openmetrics

    return openmetrics([(tick, readings_at(tick)) for tick in ticks()])


# The agent's side ---------------------------------------------------------------------

def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mig_uuid(gpu: Gpu, instance: str) -> str:
    """NVML's own MIG UUID as the agent reads it (not the importer's)."""
    return f"MIG-{uuid.uuid5(uuid.NAMESPACE_URL, f'{gpu.uuid}/{instance}')}"


def _mean(values: list[int]) -> float:
    mean = Fraction(sum(values), len(values))
    return float((mean * 100 + Fraction(1, 2)).__floor__() / 100)


def _jobs(gpu: Gpu, instance: str | None) -> list[tuple[dict, str, str | None]]:
    """(job, command, user) of each workload on the GPU (or MIG instance)."""
    pods = [gpu.mig_pods[instance]] if instance in gpu.mig_pods else \
        list(gpu.pods) or ([gpu.pod] if gpu.pod and instance is None else [])
    out = [({"source": "kubernetes", "id": pod, "account": namespace}, container, None)
           for namespace, pod, container in pods]
    for job in gpu.hpc_jobs or ((gpu.hpc_job,) if gpu.hpc_job else ()):
        account, user = JOBS[job]
        out.append(({"source": "slurm", "id": job, "account": account}, "python", user))
    return out


def _windows(begin: int, end: int) -> list[tuple[int, int]]:
    """The agent's windows of a run: aligned, a partial one at either end."""
    out, start = [], begin
    while start < end:
        stop = min(end, (start // WINDOW_S + 1) * WINDOW_S)
        out.append((start, stop))
        start = stop
    return out


def _device_records(gpu: Gpu, instance: str | None, device: str, span: tuple[int, int],
                    found: list[tuple[int, Reading]]) -> tuple[dict, list[dict]]:
    utils = [reading.instance_util.get(instance, reading.util) for _, reading in found]
    parent_of_mig = instance is None and gpu.mig_instances
    no_util = parent_of_mig or (gpu.mig_instances and not gpu.prof)
    sample = {"gpu_uuid": device, "window_start": _iso(span[0]), "window_end": _iso(span[1]),
              "readings": len(found),
              "util_gpu_avg": None if no_util else _mean(utils),
              "util_gpu_max": None if no_util else float(max(utils)),
              "memory_used_bytes_avg": int(1024 * MIB), "memory_used_bytes_max": int(1024 * MIB),
              "power_w_avg": None if instance else 300.0}
    processes = []
    if not parent_of_mig:
        for number, (job, command, user) in enumerate(_jobs(gpu, instance)):
            processes.append({"gpu_uuid": device, "window_start": sample["window_start"],
                              "window_end": sample["window_end"], "pid": 4000 + number,
                              "pid_start": 77, "user": user, "command": command, "job": job})
    return sample, processes


def agent_batches(hostname: str) -> list[tuple[int, dict]]:
    """(when it is sent, batch) of a node's agent over the month, 30 windows a batch; a
    heartbeat first at each start (its GPUs are registered then)."""
    runs, gpus = NODES[hostname]
    entries = []
    for gpu in gpus:
        entries.append({"uuid": gpu.uuid, "index": gpu.index, "name": gpu.model})
        entries += [{"uuid": _mig_uuid(gpu, i), "index": int(i), "name": f"{gpu.model} MIG",
                     "mig_parent_uuid": gpu.uuid} for i in gpu.mig_instances]
    out = []
    for number, (begin, end, boot) in enumerate(runs):
        run = {"hostname": hostname, "number": number, "boot": boot, "gpus": entries}
        out.append((begin, _body(run, "hello", begin)))
        windows = _windows(begin, end)
        for first in range(0, len(windows), 30):
            samples, processes, events = [], [], []
            for span in windows[first:first + 30]:
                by_gpu: dict[str, list] = {}
                for tick in range(span[0] - span[0] % -TICK_S, span[1], TICK_S):
                    for gpu, reading in readings_at(tick):
                        by_gpu.setdefault(gpu.uuid, []).append((tick, reading))
                for gpu in gpus:
                    found = by_gpu.get(gpu.uuid)
                    if not found:
                        continue
                    devices = [(None, gpu.uuid)] + [(i, _mig_uuid(gpu, i))
                                                    for i in gpu.mig_instances]
                    for instance, device in devices:
                        sample, records = _device_records(gpu, instance, device, span, found)
                        samples.append(sample)
                        processes += records
                events += [e for e in _events(span) if e["gpu_uuid"] in {g.uuid for g in gpus}]
            sent = windows[min(first + 30, len(windows)) - 1][1]
            out.append((sent, _body(run, str(first), sent, samples=samples,
                                    processes=processes, events=events)))
    return out


def _body(run: dict, key: str, sent: int, **records) -> dict:
    hostname, number = run["hostname"], run["number"]
    return {"schema_version": 1,
            "batch_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{hostname}/{number}/{key}")),
            "agent_instance_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{hostname}/{number}")),
            "sent_at": _iso(sent), "node": {"hostname": hostname, "boot_id": run["boot"]},
            "gpus": run["gpus"], "samples": [], "processes": [], "events": [], **records}


def _events(span: tuple[int, int]) -> list[dict]:
    out = []
    if span[0] <= FAIL_AT < span[1]:
        for kind, extra in (("xid", {"xid": 79, "detail": "GPU has fallen off the bus"}),
                            ("gpu_lost", {"detail": "GPU stopped answering NVML"})):
            out.append({"event_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"K0/{kind}")),
                        "gpu_uuid": K0.uuid, "ts": _iso(FAIL_AT), "type": kind, **extra})
    if span[0] <= REMAP_AT < span[1]:
        out.append({"event_id": str(uuid.uuid5(uuid.NAMESPACE_URL, "H0/remap")),
                    "gpu_uuid": H0.uuid, "ts": _iso(REMAP_AT), "type": "remap_pending"})
    return out
