"""The test scenario: GPUs as dcgm-exporter reports them, values constant within each
60 s window (so figures from the agent and from the importer are exactly equal)."""

from tests.telemetry.exporter import Gpu, Reading

POD_GPU = Gpu(uuid="GPU-8932F937-D72C-4106-C12F-20BD9FAED9F6", index=0,
              hostname="dcgm-exporter-x7k2p", pod=("vision", "train-resnet-0", "pytorch"))
SLURM_GPU = Gpu(uuid="GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0", index=1,
                uuid_label="uuid", hostname_label="hostname", hostname="gpu-node-02",
                hpc_job="424242", prof=False)
MIG_GPU = Gpu(uuid="GPU-63bc0b91-2265-1b94-831c-15c41fe92675", index=2,
              model="NVIDIA A100-SXM4-80GB", hostname="gpu-node-02", mig_instances=("1", "2"))
IDLE_GPU = Gpu(uuid="GPU-a810a1fc-9f46-0e6f-5cef-bf34c2248e12", index=3, hostname="gpu-node-02")

STEP_S = 10
WINDOW_S = 60
POWER_W = 300.0
GAP = range(20 * 60, 25 * 60)  # POD_GPU's exporter is gone for these 5 minutes (offsets)
RESET_AT = 30 * 60  # SLURM_GPU's energy counter restarts (a driver reload)
XID_AT = 40 * 60  # SLURM_GPU's last XID becomes 79
BLANK_POWER = range(10 * 60, 11 * 60)  # MIG_GPU's power is DCGM's blank


def util_of(gpu: Gpu, window: int) -> float:
    """The utilization of a GPU in its `window`-th window (constant within it)."""
    if gpu is IDLE_GPU:
        return 0.0
    return float((window * 7 + gpu.index * 13) % 101)


def readings(offset: int) -> list[tuple[Gpu, Reading]]:
    """What the exporter says `offset` seconds after the scenario's start."""
    window = offset // WINDOW_S
    out = []
    for gpu in (POD_GPU, SLURM_GPU, MIG_GPU, IDLE_GPU):
        if gpu is POD_GPU and offset in GAP:
            continue
        energy = offset * POWER_W * 1000
        if gpu is SLURM_GPU and offset >= RESET_AT:
            energy = (offset - RESET_AT) * POWER_W * 1000
        out.append((gpu, Reading(
            util=util_of(gpu, window), fb_mib=2048.0 + window, power_w=POWER_W,
            energy_mj=energy, xid=79 if gpu is SLURM_GPU and offset >= XID_AT else 0,
            power_blank=gpu is MIG_GPU and offset in BLANK_POWER)))
    return out


def history(start: int, seconds: int) -> list[tuple[int, list]]:
    return [(start + offset, readings(offset)) for offset in range(0, seconds, STEP_S)]
