"""Settings of the telemetry importer, read from the environment with working defaults."""

import os

from gpuquota.core.env import env_int

# How often beat looks for sources due a pull (each source has its own interval).
BEAT_INTERVAL_S = env_int("TELEMETRY_BEAT_INTERVAL_S", 10, 1)
# Prometheus refuses more than 11,000 points per series in one query_range answer.
MAX_POINTS_PER_SERIES = 10_999
# One import step covers at most this much time (memory stays bounded on long back-fills).
CHUNK_S = env_int("TELEMETRY_CHUNK_S", 6 * 3600, 600)
# Hostile or broken answers: refused whole, with a clear error, before anything is stored.
MAX_RESPONSE_BYTES = env_int("TELEMETRY_MAX_RESPONSE_BYTES", 256 * 1024 * 1024, 1024)
MAX_SERIES = env_int("TELEMETRY_MAX_SERIES", 50_000, 1)
MAX_LABEL_VALUE_CHARS = env_int("TELEMETRY_MAX_LABEL_VALUE_CHARS", 1024, 16)
HTTP_TIMEOUT_S = env_int("TELEMETRY_HTTP_TIMEOUT_S", 30, 1)
# A source naming Slurm jobs (`hpc_job`) waits for the Slurm accounting import to reach a
# window (its jobs' accounts and users), at most this long after the window closed.
SLURM_WAIT_S = env_int("TELEMETRY_SLURM_WAIT_S", 900, 0)
# Secrets of sources (passwords, bearer tokens) are encrypted with this key; by default
# one derived from SECRET_KEY.
SECRET_KEY = os.environ.get("TELEMETRY_SECRET_KEY", "")


def allowed_networks_raw() -> str:
    """TELEMETRY_ALLOWED_NETWORKS: networks that are not public but that sources may reach
    (comma-separated CIDRs, e.g. `10.20.0.0/16,127.0.0.1/32`); none by default. Read at each
    use, so a command (the demo) may add its own loopback exporters."""
    return os.environ.get("TELEMETRY_ALLOWED_NETWORKS", "")
