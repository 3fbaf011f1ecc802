"""The dcgm-exporter fields gpuquota reads, and the per-window figures it makes of them.

A window's figure is named by what it is (`util_avg`...) and computed either by
Prometheus (`<fn>(<metric>{selector}[<window>s])`, see `prometheus.py`) or, for
exporters scraped directly, by `exposition.window_figures` from the stored readings:
both give the same table, which `normalise.py` turns into the agent protocol's records."""

import math
from dataclasses import dataclass

PROF_UTIL = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # 0-1, per MIG instance too
DEV_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent, not reported for MIG
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
POWER = "DCGM_FI_DEV_POWER_USAGE"  # W
TEMP = "DCGM_FI_DEV_GPU_TEMP"  # °C
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # mJ since boot
XID = "DCGM_FI_DEV_XID_ERRORS"  # the last XID; never resets
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"  # per xid label, when the exporter counts them
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ECC_SBE = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"  # not in dcgm-exporter's default set
UNC_REMAPPED = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"  # in the default set
REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"  # in the default set; sticky
# Profiling fields (0-1, per MIG instance too), where the exporter's field set has them: the
# SMs' share of active cycles, the warps resident against the maximum, the tensor pipes'
# share of active cycles, the memory interface's. They become the samples'
# `sm_active_avg`, `sm_occupancy_avg`, `tensor_active_avg`, `dram_active_avg` (percent).
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
SM_OCCUPANCY = "DCGM_FI_PROF_SM_OCCUPANCY"
TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"
PROFILING = {"sm_active_avg": SM_ACTIVE, "sm_occupancy_avg": SM_OCCUPANCY,
             "tensor_active_avg": TENSOR_ACTIVE, "dram_active_avg": DRAM_ACTIVE}

METRICS = (PROF_UTIL, DEV_UTIL, FB_USED, POWER, TEMP, ENERGY, XID, XID_COUNT, ECC_DBE,
           ECC_SBE, REMAP_PENDING, UNC_REMAPPED, REMAP_FAILURE, *PROFILING.values())


@dataclass(frozen=True)
class Figure:
    name: str
    fn: str  # a PromQL *_over_time function, or `resets`
    metric: str
    device_level: bool  # repeated on every MIG instance of a GPU: read once


FIGURES = (
    Figure("prof_count", "count_over_time", PROF_UTIL, False),
    Figure("prof_avg", "avg_over_time", PROF_UTIL, False),
    Figure("prof_max", "max_over_time", PROF_UTIL, False),
    Figure("util_count", "count_over_time", DEV_UTIL, False),
    Figure("util_avg", "avg_over_time", DEV_UTIL, False),
    Figure("util_max", "max_over_time", DEV_UTIL, False),
    Figure("fb_avg", "avg_over_time", FB_USED, False),
    Figure("fb_max", "max_over_time", FB_USED, False),
    Figure("power_avg", "avg_over_time", POWER, True),
    Figure("temp_max", "max_over_time", TEMP, True),
    Figure("energy_last", "last_over_time", ENERGY, True),
    Figure("energy_resets", "resets", ENERGY, True),
    Figure("xid_last", "last_over_time", XID, True),
    Figure("xid_count_last", "last_over_time", XID_COUNT, True),
    Figure("dbe_last", "last_over_time", ECC_DBE, True),
    Figure("sbe_last", "last_over_time", ECC_SBE, True),
    Figure("remap_max", "max_over_time", REMAP_PENDING, True),
    Figure("unc_remapped_last", "last_over_time", UNC_REMAPPED, True),
    Figure("remap_failure_max", "max_over_time", REMAP_FAILURE, True),
    *(Figure(name, "avg_over_time", metric, False) for name, metric in PROFILING.items()),
)

# DCGM's "blank" values (no data, not supported): int64 from 0x7ffffffffffffff0 (~9.22e18),
# int32 from 0x7ffffff0, fp64 2**47. An aggregate above PLAUSIBLE_MAX had one in its window.
INT32_BLANK = 0x7FFFFFF0
FP64_BLANK = 140737488355328.0
PLAUSIBLE_MAX = 1e15
INT32_METRICS = frozenset({DEV_UTIL, TEMP, XID, REMAP_PENDING, REMAP_FAILURE})


def reading_usable(metric: str, value: float) -> bool:
    """False for NaN, infinities, negative readings and DCGM's blank sentinels."""
    if not math.isfinite(value) or value < 0 or value >= PLAUSIBLE_MAX or value == FP64_BLANK:
        return False
    return not (metric in INT32_METRICS and value >= INT32_BLANK)


def figure_usable(value: float) -> bool:
    """False for NaN (every comparison fails), infinities, negative values and blanks."""
    return 0 <= value < PLAUSIBLE_MAX and value != FP64_BLANK
