"""A simulated node behind the Backend interface: the demo's, the benchmark's and the tests' GPUs.

Everything is a function of (seed, hostname, GPU index, time), so a restarted simulated node
reports the same GPUs, and two runs over the same instants report the same readings.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent.model import BackendEvent, GpuInfo, GpuLost, GpuReading, Owner, ProcessReading
from agent.owners import GpuJobRecord, gpu_job_record

# name -> (memory total in bytes as NVML reports it, enforced power limit in W, idle power in W)
MODELS = {
    "NVIDIA H100 80GB HBM3": (85520809984, 700.0, 70.0),
    "NVIDIA H200": (150754820096, 700.0, 75.0),
    "NVIDIA A100-SXM4-80GB": (85899345920, 400.0, 55.0),
    "NVIDIA A100-SXM4-40GB": (42505273344, 400.0, 50.0),
    "NVIDIA L4": (24152899584, 72.0, 16.0),
}
PROFILES = ("training", "inference", "notebook", "idle", "xid79", "mig")  # the default order
FILLER_PROFILES = ("training", "inference", "notebook", "idle")
DEFAULT_USERS = ("alice", "bob", "carol", "dave")
DEFAULT_ACCOUNTS = ("physics", "vision", "nlp")
JOB_PERIOD_S = 2 * 3600  # a simulated training job runs this long, then the next one starts
DRIVER_VERSION = "580.65.06"


def _digest(*parts: object) -> bytes:
    return hashlib.sha256(":".join(map(str, parts)).encode()).digest()


def simulated_uuid(prefix: str, *parts: object) -> str:
    """A stable NVML-style UUID derived from `parts` (seed, hostname, index...)."""
    h = _digest(*parts).hex()
    return f"{prefix}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass
class SimGpu:
    """The simulated state of one GPU or MIG device."""

    info: GpuInfo
    profile: str
    idle_w: float
    energy_mj: int
    last_t: float | None = None


class Simulator:
    """N virtual GPUs with the behaviours a real fleet shows (see PROFILES)."""

    def __init__(self, count: int, *, seed: int, hostname: str,
                 models: tuple[str, ...] = ("NVIDIA H100 80GB HBM3",),
                 profiles: tuple[str, ...] = (), users: tuple[str, ...] = DEFAULT_USERS,
                 accounts: tuple[str, ...] = DEFAULT_ACCOUNTS, fail_after_s: float = 600.0,
                 clock: Callable[[], float] = time.time, borrowers_file: str = "",
                 gpu_jobs_dir: str = "") -> None:
        unknown = [m for m in models if m not in MODELS]
        unknown += [p for p in profiles if p not in PROFILES]
        if unknown or not models or not users or not accounts:
            raise ValueError(f"unknown simulated models or profiles: {', '.join(unknown)}; "
                             f"models: {', '.join(MODELS)}; profiles: {', '.join(PROFILES)}")
        self.seed, self.hostname, self.clock = seed, hostname, clock
        self.users, self.accounts = users, accounts
        self.fail_at = clock() + fail_after_s
        self.borrowers = BorrowersFile(borrowers_file)
        self.gpu_jobs = gpu_jobs_dir
        self._events: list[BackendEvent] = []
        self._failed: set[str] = set()
        self._gpus: list[SimGpu] = []
        for index in range(count):
            profile = profiles[index % len(profiles)] if profiles else (
                PROFILES[index] if index < len(PROFILES)
                else FILLER_PROFILES[index % len(FILLER_PROFILES)])
            self._add(index, models[index % len(models)], profile)

    def _add(self, index: int, model: str, profile: str) -> None:
        memory, limit, idle_w = MODELS[model]
        uuid = simulated_uuid("GPU", self.seed, self.hostname, index)
        info = GpuInfo(uuid, index, model, f"00000000:{0x18 + 0x10 * index:02X}:00.0", memory,
                       limit, key=len(self._gpus))
        start_mj = int.from_bytes(_digest(uuid, "energy")[:4], "big") * 1000
        self._gpus.append(SimGpu(info, profile, idle_w, start_mj))
        if profile != "mig":
            return
        # Two 3g slices, each with half of the memory, as `nvidia-smi mig -cgi 9,9` leaves them.
        for slot in range(2):
            mig = GpuInfo(simulated_uuid("MIG", self.seed, self.hostname, index, slot), slot,
                          f"{model} MIG 3g.{memory // 2 // 10**9}gb", None, memory // 2, None,
                          mig_parent_uuid=uuid, key=len(self._gpus))
            self._gpus.append(SimGpu(mig, "training" if slot == 0 else "inference", 0.0, 0))

    def driver_version(self) -> str | None:
        """The simulated driver's version."""
        return DRIVER_VERSION

    def discover(self) -> list[GpuInfo]:
        """Every simulated GPU and MIG device, parents first."""
        return [g.info for g in self._gpus]

    def drain_events(self) -> list[BackendEvent]:
        """The XIDs raised since the last call."""
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        """Nothing to release."""

    def read(self, gpu: GpuInfo) -> GpuReading:
        """One poll of a simulated GPU at the clock's current instant."""
        sim = self._gpus[gpu.key]
        now = self.clock()
        if sim.profile == "xid79" and now >= self.fail_at:
            if gpu.uuid not in self._failed:
                self._failed.add(gpu.uuid)
                self._events.append(BackendEvent(gpu.uuid, "xid", now, 79,
                                                 "GPU has fallen off the bus"))
            raise GpuLost(gpu.uuid)
        rng = random.Random(_digest(self.seed, gpu.uuid, round(now, 3)))
        polls = 1 if sim.last_t is None else max(1, min(10, int(now - sim.last_t)))
        util = [self._util(sim.profile, now - k, rng) for k in range(polls)]
        slurm_job = None if gpu.mig_parent_uuid else self._slurm_job(gpu.index)
        borrower = None if gpu.mig_parent_uuid or slurm_job else self.borrowers.user(gpu.uuid)
        if borrower or slurm_job:
            util = [min(100, max(0, round(rng.gauss(85, 5)))) for _ in util]
        mean_util = sum(util) / len(util)
        if gpu.mig_parent_uuid:
            # Power and energy exist per physical GPU only. NVML has no utilization per slice
            # either; the simulator gives one (as DCGM would) so the demo's MIG GPU shows work.
            power, util_gpu = None, util
        elif sim.profile == "mig":
            power, util_gpu = sim.idle_w + 250 + rng.uniform(-10, 10), None
        else:
            power = sim.idle_w + mean_util / 100 * ((gpu.power_limit_w or 0) * 0.9 - sim.idle_w)
            util_gpu = util
        if power is not None and sim.last_t is not None:
            sim.energy_mj += int(power * (now - sim.last_t) * 1000)
        sim.last_t = now
        processes = self._processes(sim, now, util, rng)
        if slurm_job:
            processes = [ProcessReading(
                pid=6000 + gpu.index, memory_used_bytes=int((gpu.memory_total_bytes or 0) * 0.7),
                util_sm=util, pid_start=45678, command="python",
                owner=Owner(None, slurm_job.user, "slurm", slurm_job.job_id, slurm_job.account))]
        elif borrower:
            processes = [ProcessReading(
                pid=5000 + gpu.index, memory_used_bytes=int((gpu.memory_total_bytes or 0) * 0.6),
                util_sm=util, pid_start=34567, command="python preemptible.py",
                owner=Owner(None, borrower, "unix"))]
        return GpuReading(
            util_gpu=util_gpu,
            util_mem=None if util_gpu is None else round(mean_util * 0.45),
            memory_used_bytes=sum(p.memory_used_bytes or 0 for p in processes) + 512 * 2**20,
            power_w=None if power is None else round(power, 2),
            energy_mj=None if power is None else sim.energy_mj,
            temp_c=None if gpu.mig_parent_uuid else int(32 + mean_util * 0.4 + rng.uniform(0, 2)),
            clock_event_reasons=None if gpu.mig_parent_uuid else (1 if mean_util < 5 else 0),
            ecc_corrected_total=0, ecc_uncorrected_total=0, remap_pending=False,
            processes=processes,
        )

    def _slurm_job(self, index: int) -> GpuJobRecord | None:
        """The real Slurm job that the prolog recorded on this (fake) GPU, if any: the dev
        cluster's jobs run on GPUs that exist only here, and show as busy processes of theirs
        (the epilog removes the record at the job's end)."""
        return gpu_job_record(self.gpu_jobs, index) if self.gpu_jobs else None

    @staticmethod
    def _util(profile: str, t: float, rng: random.Random) -> int:
        if profile in ("training", "xid79"):
            return min(100, max(0, round(rng.gauss(95, 3))))
        if profile == "inference":
            # Requests come in bursts whose rate swells and ebbs over a quarter of an hour.
            busy = 0.35 + 0.3 * math.sin(2 * math.pi * t / 900)
            return rng.randint(60, 100) if rng.random() < busy else rng.randint(0, 3)
        return 0

    def _processes(self, sim: SimGpu, now: float, util: list[int],
                   rng: random.Random) -> list[ProcessReading]:
        gpu = sim.info
        total = gpu.memory_total_bytes or 0
        pick = int.from_bytes(_digest(self.seed, gpu.uuid, "owner")[:4], "big")
        user = self.users[pick % len(self.users)]
        uid = 1000 + pick % len(self.users)
        account = self.accounts[pick % len(self.accounts)]
        if sim.profile in ("training", "xid79"):
            epoch = int(now // JOB_PERIOD_S)
            job = 100000 + int.from_bytes(_digest(gpu.uuid, epoch)[:3], "big") % 900000
            return [ProcessReading(
                pid=2000 + job % 4000000, memory_used_bytes=int(total * 0.82),
                util_sm=[max(0, u - 3) for u in util], pid_start=epoch * JOB_PERIOD_S * 100,
                command="python", owner=Owner(uid, user, "slurm", str(job), account))]
        if sim.profile == "inference":
            pod = f"infer-{_digest(gpu.uuid, 'pod').hex()[:5]}"
            return [ProcessReading(
                pid=3000 + pick % 1000, memory_used_bytes=int(total * 0.35 + rng.randint(0, 2**30)),
                util_sm=[max(0, u - 5) for u in util], pid_start=12345,
                command="tritonserver", owner=Owner(uid, user, "kubernetes", pod, account))]
        if sim.profile == "notebook":
            return [ProcessReading(
                pid=4000 + pick % 1000, memory_used_bytes=20 * 2**30, util_sm=[],
                pid_start=23456, command="python", owner=Owner(uid, user, "unix"))]
        return []


class BorrowersFile:
    """The preemptible work a site's scheduler places on lent GPUs, for the demo: a JSON
    object {GPU UUID: unix user} (rewritten by the demo as GPUs are lent and returned). A
    GPU listed runs one busy process of that user instead of its profile; one no longer
    listed is free again at the next poll. Read again when the file changes."""

    def __init__(self, path: str) -> None:
        self.path, self._mtime, self._users = path, None, {}

    def user(self, uuid: str) -> str | None:
        if not self.path:
            return None
        try:
            mtime = os.stat(self.path).st_mtime_ns
            if mtime != self._mtime:
                with open(self.path) as f:
                    users = json.load(f)
                self._mtime = mtime
                self._users = {str(k): str(v) for k, v in users.items()} if isinstance(
                    users, dict) else {}
        except (OSError, ValueError):
            self._mtime, self._users = None, {}
        return self._users.get(uuid)
