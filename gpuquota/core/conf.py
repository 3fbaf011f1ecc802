"""Settings of the core app, read from the environment with working defaults."""

from gpuquota.core.env import env_int

# How long a client is asked to wait (Retry-After) while the database is unreachable.
RETRY_AFTER_S = env_int("DATABASE_RETRY_AFTER_S", 30, 1)
