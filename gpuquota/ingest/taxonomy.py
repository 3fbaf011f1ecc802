"""The failure taxonomy (docs/reliability.md): what each XID and event says about a GPU,
from NVIDIA's Xid catalogue for Ampere and newer (docs.nvidia.com/deploy/xid-errors,
"Analyzing Xid Errors with the Xid Catalog": per XID a component and a resolution bucket,
the immediate action) and its GPU memory error management guide (row remapping).

Three rules hold for every entry:

- an **application** XID (13, 31, 43, 45...: the catalogue's RESTART_APP for a fault of
  the program, not of the GPU) is never a hardware failure and never opens a health
  interval;
- a **critical** entry is a hardware failure: it counts in the reliability figures and
  the lemon score, and (policy) drains the GPU at once;
- the spec's health table (accounting.md, Inventory) is the `health` column: `failed`,
  `degraded` or nothing; this module is its one home (`ingest.health` reads it).

An XID missing from the table is `unknown`: kept as an event, counted nowhere.
"""

from dataclasses import dataclass
from enum import StrEnum


class Action(StrEnum):
    """What the failure needs before the GPU serves again (the catalogue's buckets)."""

    NONE = "none"                # nothing: informational
    RESTART_APP = "restart_app"  # the program restarts; the GPU is fine
    RESET_GPU = "reset_gpu"      # nvidia-smi -r (or a drain and reset)
    REBOOT = "reboot"            # the node reboots (RESTART_BM)
    REPLACE = "replace"          # CONTACT_SUPPORT: field diagnostic, RMA


class Severity(StrEnum):
    APPLICATION = "application"  # the program's fault: never counted as hardware
    INFO = "info"
    WARNING = "warning"          # hardware, degraded: a lemon signal, drain after jobs end
    CRITICAL = "critical"        # hardware failure: counted, drain now


class Component(StrEnum):
    APPLICATION = "application"
    MEMORY = "memory"            # HBM/ECC, row remapping
    BUS = "pcie"                 # PCIe, fallen off the bus
    NVLINK = "nvlink"
    FIRMWARE = "firmware"        # GSP, PMU, micro-controllers
    ENGINE = "engine"            # compute/copy/video engines
    DRIVER = "driver"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Entry:
    xid: int | None
    name: str
    component: Component
    action: Action
    severity: Severity
    health: str | None = None  # "failed" | "degraded" | None: the spec's health table

    @property
    def is_hardware_failure(self) -> bool:
        return self.severity == Severity.CRITICAL

    @property
    def is_hardware(self) -> bool:
        return self.severity in (Severity.CRITICAL, Severity.WARNING)


def _e(xid, name, component, action, severity, health=None) -> Entry:
    return Entry(xid, name, component, action, severity, health)


C, A, S = Component, Action, Severity
_TABLE = [
    _e(8, "GPU stopped processing (channel idle timeout)", C.DRIVER, A.RESTART_APP, S.INFO),
    _e(13, "Graphics engine exception", C.APPLICATION, A.RESTART_APP, S.APPLICATION),
    _e(31, "GPU memory page fault", C.APPLICATION, A.RESTART_APP, S.APPLICATION),
    _e(32, "Invalid or corrupted push buffer stream", C.DRIVER, A.RESTART_APP, S.INFO),
    _e(38, "Driver firmware error", C.DRIVER, A.RESTART_APP, S.INFO),
    _e(43, "GPU stopped processing (reset channel)", C.APPLICATION, A.RESTART_APP,
       S.APPLICATION),
    _e(45, "Preemptive cleanup, due to previous errors", C.APPLICATION, A.NONE,
       S.APPLICATION),
    _e(48, "Double-bit ECC error", C.MEMORY, A.RESET_GPU, S.CRITICAL, "failed"),
    _e(61, "Internal micro-controller breakpoint/warning", C.FIRMWARE, A.RESET_GPU, S.WARNING),
    _e(62, "Internal micro-controller halt", C.FIRMWARE, A.RESET_GPU, S.WARNING),
    _e(63, "ECC page retirement or row remapping recorded", C.MEMORY, A.RESET_GPU,
       S.WARNING, "degraded"),
    _e(64, "ECC page retirement or row remapping failure", C.MEMORY, A.REPLACE, S.CRITICAL,
       "failed"),
    _e(68, "Video processor exception", C.ENGINE, A.RESTART_APP, S.INFO),
    _e(69, "Graphics engine class error", C.APPLICATION, A.RESTART_APP, S.APPLICATION),
    _e(74, "NVLink error", C.NVLINK, A.RESET_GPU, S.WARNING, "degraded"),
    _e(79, "GPU has fallen off the bus", C.BUS, A.REBOOT, S.CRITICAL, "failed"),
    _e(92, "High single-bit ECC error rate", C.MEMORY, A.NONE, S.WARNING, "degraded"),
    _e(94, "Contained ECC error", C.MEMORY, A.RESTART_APP, S.WARNING, "degraded"),
    _e(95, "Uncontained ECC error", C.MEMORY, A.RESET_GPU, S.CRITICAL, "failed"),
    _e(109, "Context switch timeout", C.APPLICATION, A.RESTART_APP, S.APPLICATION),
    _e(119, "GSP RPC timeout", C.FIRMWARE, A.RESET_GPU, S.CRITICAL, "failed"),
    _e(120, "GSP error", C.FIRMWARE, A.RESET_GPU, S.CRITICAL, "failed"),
    _e(121, "C2C link corrected error", C.NVLINK, A.NONE, S.INFO),
    _e(140, "Unrecovered ECC error", C.MEMORY, A.RESET_GPU, S.WARNING),
    _e(143, "GPU initialization failure", C.FIRMWARE, A.REPLACE, S.WARNING),
    _e(154, "GPU recovery action changed", C.DRIVER, A.NONE, S.INFO),
]
XIDS: dict[int, Entry] = {entry.xid: entry for entry in _TABLE}

EVENTS: dict[str, Entry] = {
    "gpu_lost": _e(None, "GPU lost (NVML cannot reach it)", C.BUS, A.REBOOT, S.CRITICAL,
                   "failed"),
    "ecc_uncorrected": _e(None, "Uncorrected ECC error", C.MEMORY, A.RESET_GPU, S.CRITICAL),
    "remap_pending": _e(None, "Row remap pending", C.MEMORY, A.RESET_GPU, S.WARNING,
                        "degraded"),
}
UNKNOWN = _e(None, "Unknown XID", C.UNKNOWN, A.NONE, S.INFO)

FAILED_XIDS = frozenset(x for x, e in XIDS.items() if e.health == "failed")
DEGRADED_XIDS = frozenset(x for x, e in XIDS.items() if e.health == "degraded")
APPLICATION_XIDS = frozenset(x for x, e in XIDS.items() if e.severity == S.APPLICATION)
CRITICAL_XIDS = frozenset(x for x, e in XIDS.items() if e.severity == S.CRITICAL)
HARDWARE_XIDS = frozenset(x for x, e in XIDS.items() if e.is_hardware)
HARDWARE_EVENT_TYPES = frozenset(EVENTS)
CRITICAL_EVENT_TYPES = frozenset(t for t, e in EVENTS.items() if e.is_hardware_failure)

# NVML's recovery action (XID 154 / nvmlDeviceGetGpuRecoveryAction): what the driver asks
NVML_RECOVERY_ACTIONS = {0: Action.NONE, 1: Action.RESET_GPU, 2: Action.REBOOT,
                         3: Action.RESET_GPU,  # drain P2P: reset once peers are idle
                         4: Action.RESET_GPU}  # drain and reset


def classify(*, type: str, xid: int | None = None) -> Entry:
    """The taxonomy entry of an event (an `xid` event by its number); unknown: `UNKNOWN`."""
    if type == "xid":
        return XIDS.get(xid, UNKNOWN)
    return EVENTS.get(type, UNKNOWN)


@dataclass(frozen=True)
class RemapState:
    """`nvmlDeviceGetRemappedRows`: remaps for correctable and uncorrectable errors, a remap
    pending (a reset activates it) and a remapping failure (no spare row was left)."""

    correctable: int = 0
    uncorrectable: int = 0
    pending: bool = False
    failure: bool = False


# NVIDIA's memory error guide: a remapping failure means a bank had no spare row left, the
# RMA condition; each bank holds 8 spare rows, so uncorrectable remaps approaching 8 leave
# little headroom (a site may lower it).
REMAP_SPARE_ROWS_PER_BANK = 8


def remap_verdict(state: RemapState) -> tuple[Action, float]:
    """(the action the remap state asks for, the headroom left in [0, 1]): a failure ->
    replace (headroom 0); a pending remap -> reset; otherwise none."""
    if state.failure:
        return Action.REPLACE, 0.0
    headroom = max(0.0, 1 - state.uncorrectable / REMAP_SPARE_ROWS_PER_BANK)
    return (Action.RESET_GPU if state.pending else Action.NONE), headroom
