"""Settings of the ingestion app, read from the environment with working defaults."""



from gpuquota.core.env import env_int

SUPPORTED_SCHEMA_VERSIONS = (1,)
#: The oldest agent this server takes batches from (docs/operations.md, "Agents and server");
#: an older one is answered 422 and keeps its batches spooled until it is upgraded.
MIN_AGENT_VERSION = "1.0.0"
# Raw samples and process records older than this are dropped, a whole partition at a time.
# At least 9: the protocol accepts windows up to 8 days old.
RAW_SAMPLE_RETENTION_DAYS = env_int("RAW_SAMPLE_RETENTION_DAYS", 90, 9)
# A node whose clock differs from the server's by more than this is flagged.
CLOCK_SKEW_THRESHOLD_S = env_int("INGEST_CLOCK_SKEW_THRESHOLD_S", 30, 1)
MAX_BODY_BYTES = env_int("INGEST_MAX_BODY_BYTES", 4 * 1024 * 1024, 1024)
MAX_SAMPLES = env_int("INGEST_MAX_SAMPLES", 5000, 1)
MAX_PROCESSES = env_int("INGEST_MAX_PROCESSES", 5000, 1)
MAX_EVENTS = env_int("INGEST_MAX_EVENTS", 1000, 1)
# Daily partitions created this many days ahead by the beat task.
PARTITIONS_AHEAD_DAYS = env_int("INGEST_PARTITIONS_AHEAD_DAYS", 7, 1)
# A GPU silent this long on its node may be claimed by another node.
GPU_MOVE_SILENCE_S = 15 * 60
MAX_AGE_S = 8 * 24 * 3600
MAX_FUTURE_S = 5 * 60
MAX_WINDOW_S = 600


def node_batches_per_minute() -> int:
    """Batches one node may send per minute before it gets 429 with Retry-After
    (INGEST_NODE_BATCHES_PER_MINUTE, default 300; 0: no limit). Read at call time."""
    from django.conf import settings

    value = getattr(settings, "INGEST_NODE_BATCHES_PER_MINUTE", None)
    if value is None:
        return env_int("INGEST_NODE_BATCHES_PER_MINUTE", 300, 0)
    return int(value)
