"""Settings of the core app, read from the environment with working defaults."""

from gpuquota.core.env import env_int

# How long a client is asked to wait (Retry-After) while the database is unreachable.
RETRY_AFTER_S = env_int("DATABASE_RETRY_AFTER_S", 30, 1)
# How long an Idempotency-Key (or a web form's one-time token) answers with its first
# result; a repeat after that runs as a new request.
IDEMPOTENCY_KEY_TTL_S = env_int("IDEMPOTENCY_KEY_TTL_S", 24 * 3600, 60)
