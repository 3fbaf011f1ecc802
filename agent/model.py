"""The one narrow interface between the agent and a GPU source (real NVML or the simulator)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class GpuLost(Exception):
    """The GPU stopped answering (fell off the bus, needs a reset); its readings end here."""


class BackendUnavailable(Exception):
    """The GPU source cannot start at all (no driver); the message is one line for the operator."""


class BackendNotReady(BackendUnavailable):
    """The driver is installed but NVML cannot answer now (its module not loaded yet, an
    upgrade or a reset in progress): the agent reports it and tries again."""


@dataclass(frozen=True)
class Owner:
    """Who a process belongs to: the unix user and the job (Slurm, Kubernetes, Docker, plain)."""

    uid: int | None
    user: str | None
    source: str  # slurm, kubernetes, docker, unix
    job_id: str | None = None
    account: str | None = None


@dataclass(frozen=True)
class GpuInfo:
    """A GPU or MIG device as inventoried at discovery; `key` is the backend's private handle."""

    uuid: str
    index: int
    name: str | None
    pci_bus_id: str | None
    memory_total_bytes: int | None
    power_limit_w: float | None
    mig_parent_uuid: str | None = None
    key: object = field(default=None, compare=False, repr=False)
    serial: str | None = None  # the board serial (a physical GPU's; None: not reported)
    board_part_number: str | None = None


@dataclass
class ProcessReading:
    """One compute process seen on a GPU at one poll."""

    pid: int
    memory_used_bytes: int | None
    util_sm: list[float] | None  # per-process SM samples since the last poll; None: unsupported
    pid_start: int | None = None  # filled by the backend when it knows better than /proc
    command: str | None = None
    owner: Owner | None = None  # filled by the simulator; real processes are looked up in /proc


@dataclass
class GpuReading:
    """One poll of one GPU. Counters are cumulative; None means not supported or unreadable."""

    util_gpu: list[float] | None  # NVML samples since the last poll, or one instantaneous read
    util_mem: float | None
    memory_used_bytes: int | None
    power_w: float | None
    energy_mj: int | None
    temp_c: int | None
    clock_event_reasons: int | None
    ecc_corrected_total: int | None
    ecc_uncorrected_total: int | None
    remap_pending: bool | None
    processes: list[ProcessReading]


@dataclass(frozen=True)
class BackendEvent:
    """Something the GPU source reported asynchronously (an XID, an ECC error)."""

    gpu_uuid: str | None
    type: str
    ts: float
    xid: int | None = None
    detail: str | None = None


class Backend(Protocol):
    """A source of GPU readings; every GPU is read on its own so that one failure stays local."""

    def driver_version(self) -> str | None:
        """The driver version string, or None when it cannot be read."""
        ...

    def discover(self) -> list[GpuInfo]:
        """Every GPU and MIG device of the node, parents before their MIG devices."""
        ...

    def read(self, gpu: GpuInfo) -> GpuReading:
        """One poll of `gpu`; raises GpuLost when the GPU no longer answers."""
        ...

    def drain_events(self) -> list[BackendEvent]:
        """The asynchronous events received since the last call, oldest first."""
        ...

    def close(self) -> None:
        """Release the source (stop event threads, shut NVML down)."""
        ...
