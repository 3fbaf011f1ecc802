"""Settings of the schedulers app, read at call time so tests can override them."""

import os

from django.conf import settings


def credentials_key() -> str:
    """The key that encrypts scheduler credentials (SCHEDULER_CREDENTIALS_KEY; empty:
    derived from SECRET_KEY, so rotating SECRET_KEY means entering the credentials again)."""
    return str(getattr(settings, "SCHEDULER_CREDENTIALS_KEY", None)
               or os.environ.get("SCHEDULER_CREDENTIALS_KEY") or "")


def reconcile_interval_s() -> int:
    """How often beat reconciles every cluster (SCHEDULER_RECONCILE_INTERVAL_S, default 300)."""
    default = os.environ.get("SCHEDULER_RECONCILE_INTERVAL_S") or 300
    return int(getattr(settings, "SCHEDULER_RECONCILE_INTERVAL_S", default))


def reconcile_coalesce_s() -> int:
    """How long the reconciles asked by reservation, quota and loan changes wait so that the
    changes of that window share one run (SCHEDULER_RECONCILE_COALESCE_S, default 10; 0:
    a run per change). Only with a broker: the embedded default runs one per change."""
    default = os.environ.get("SCHEDULER_RECONCILE_COALESCE_S") or 10
    return int(getattr(settings, "SCHEDULER_RECONCILE_COALESCE_S", default))


def running_gpus_interval_s() -> int:
    """How often beat asks Slurm which GPUs running jobs hold (SLURM_RUNNING_GPUS_INTERVAL_S,
    default 60): a job shorter than this may be missed, and is then known by count only."""
    default = os.environ.get("SLURM_RUNNING_GPUS_INTERVAL_S") or 60
    return int(getattr(settings, "SLURM_RUNNING_GPUS_INTERVAL_S", default))
