"""Settings of the job reports (docs/jobs.md), read at call time from Django settings, else
the environment, else the defaults below: jobstats' published thresholds where it has one
(PrincetonUniversity/jobstats, config.py)."""

import os

from django.conf import settings

from gpuquota.jobs.analysis import Thresholds
from gpuquota.jobs.zero_use import ZeroUseRules


def _value(name: str, default) -> str:
    value = getattr(settings, name, None)
    if value is None:
        value = os.environ.get(name) or default
    return str(value)


def _int(name: str, default: int) -> int:
    return int(_value(name, default))


def thresholds() -> Thresholds:
    """The notes' thresholds (JOBS_* settings); the defaults are `Thresholds()`'s."""
    d = Thresholds()
    return Thresholds(
        idle_util_pct=_int("JOBS_IDLE_UTIL_PCT", d.idle_util_pct),
        low_util_pct=_int("JOBS_LOW_UTIL_PCT", d.low_util_pct),
        min_runtime_s=_int("JOBS_MIN_RUNTIME_S", d.min_runtime_s),
        mig_memory_bytes=_int("JOBS_MIG_MEMORY_BYTES", d.mig_memory_bytes),
        idle_tail_s=_int("JOBS_IDLE_TAIL_S", d.idle_tail_s),
        time_efficiency_pct=_int("JOBS_TIME_EFFICIENCY_PCT", d.time_efficiency_pct),
        interactive_idle_s=_int("JOBS_INTERACTIVE_IDLE_S", d.interactive_idle_s),
        bursty_share_pct=_int("JOBS_BURSTY_SHARE_PCT", d.bursty_share_pct),
        used_min_busy_s=_int("JOBS_USED_MIN_BUSY_S", d.used_min_busy_s),
        tensor_min_util_pct=_int("JOBS_TENSOR_MIN_UTIL_PCT", d.tensor_min_util_pct),
        tensor_active_max_pct=_int("JOBS_TENSOR_ACTIVE_MAX_PCT", d.tensor_active_max_pct),
        profiling_coverage_pct=_int("JOBS_PROFILING_COVERAGE_PCT", d.profiling_coverage_pct),
    )


def report_settle_s() -> int:
    """JOBS_REPORT_SETTLE_S: a finished job is reported this long after its end, once its
    last samples have arrived (agents send every minute, the importer every few)."""
    return _int("JOBS_REPORT_SETTLE_S", 600)


def notify_enabled() -> bool:
    """JOBS_NOTIFY_ENABLED (default on): mail the owner of a wasteful finished job."""
    return _value("JOBS_NOTIFY_ENABLED", "1").strip().lower() not in ("0", "false", "no", "off")


def notify_min_waste_gpu_s() -> int:
    """JOBS_NOTIFY_MIN_WASTE_GPU_S: a finished job is mailed about only when its notes waste
    at least this many GPU-seconds (default one GPU-hour)."""
    return _int("JOBS_NOTIFY_MIN_WASTE_GPU_S", 3600)


def notify_interval_s() -> int:
    """JOBS_NOTIFY_INTERVAL_S: at most one such mail per user in this many seconds (a day)."""
    return _int("JOBS_NOTIFY_INTERVAL_S", 86400)


def interactive_partitions() -> set[str]:
    """JOBS_INTERACTIVE_PARTITIONS: Slurm partitions whose jobs are interactive sessions."""
    return {p.strip() for p in _value("JOBS_INTERACTIVE_PARTITIONS", "interactive").split(",")
            if p.strip()}


def zero_use_rules() -> ZeroUseRules:
    """The zero-use clock's rules (JOBS_ZERO_USE_* settings); defaults `ZeroUseRules()`'s."""
    d = ZeroUseRules()
    return ZeroUseRules(
        idle_util_pct=_int("JOBS_IDLE_UTIL_PCT", d.idle_util_pct),
        warn_s=_int("JOBS_ZERO_USE_WARN_S", d.warn_s),
        staging_s=_int("JOBS_ZERO_USE_STAGING_S", d.staging_s),
        burst_s=_int("JOBS_ZERO_USE_BURST_S", d.burst_s),
    )


def zero_use_scan_interval_s() -> int:
    """JOBS_ZERO_USE_SCAN_INTERVAL_S: how often beat looks for running jobs at zero."""
    return _int("JOBS_ZERO_USE_SCAN_INTERVAL_S", 120)


def digest_min_gpu_s() -> int:
    """JOBS_DIGEST_MIN_GPU_S: a user gets the weekly digest from this many GPU-seconds held."""
    return _int("JOBS_DIGEST_MIN_GPU_S", 36000)


def digest_max_efficiency_pct() -> int:
    """JOBS_DIGEST_MAX_EFFICIENCY_PCT: ...and an efficiency under this."""
    return _int("JOBS_DIGEST_MAX_EFFICIENCY_PCT", 75)


def _scopes(name: str) -> set[str]:
    return {p.strip() for p in _value(name, "").split(",") if p.strip()}


def zero_use_cancel() -> set[str]:
    """JOBS_ZERO_USE_CANCEL: where zero-use jobs are stopped after their warnings (default
    none), comma-separated: a cluster (`della`), a Slurm partition or a Kubernetes namespace
    of it (`della:gpu`, `kube:vision`), or a team (`@vision`)."""
    return _scopes("JOBS_ZERO_USE_CANCEL")


def zero_use_requeue() -> set[str]:
    """JOBS_ZERO_USE_REQUEUE: of those, where a Slurm job is requeued rather than cancelled
    (same forms; default none). A job Slurm cannot requeue is cancelled, and the audit and
    the mail say so."""
    return _scopes("JOBS_ZERO_USE_REQUEUE")


def zero_use_cancel_after_s() -> int:
    """JOBS_ZERO_USE_CANCEL_AFTER_S: a warned job still at zero this much longer is stopped
    where the site opted in (default 3600: Job Defense Shield cancels at 120 minutes)."""
    return _int("JOBS_ZERO_USE_CANCEL_AFTER_S", 3600)


def zero_use_last_warning_s() -> int:
    """JOBS_ZERO_USE_LAST_WARNING_S: the last warning goes out this long before the job is
    stopped, and the job is never stopped sooner after it (default 900: Job Defense
    Shield's second warning at 105 minutes, 15 before the cancellation)."""
    return _int("JOBS_ZERO_USE_LAST_WARNING_S", 900)


def collect_overlap_s() -> int:
    """JOBS_COLLECT_OVERLAP_S: an incremental collection reads the process records from the
    last pass's mark less this (records that arrive late, by their window)."""
    return _int("JOBS_COLLECT_OVERLAP_S", 900)


def collect_full_every_s() -> int:
    """JOBS_COLLECT_FULL_EVERY_S: a collection reads the whole lookback (two days) again at
    least this often (records delivered hours late, an agent's spool catching up)."""
    return _int("JOBS_COLLECT_FULL_EVERY_S", 3600)
