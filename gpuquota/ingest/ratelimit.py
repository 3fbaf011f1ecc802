"""How fast one node may send batches: a fixed one-minute window counted in the
default cache (Redis when REDIS_URL is set, so every web process counts together)."""

import logging
from functools import lru_cache

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from django.utils import timezone

from gpuquota.ingest import conf

logger = logging.getLogger(__name__)
WINDOW_S = 60


def node_batch_wait_s(*, node_id: int, now: float | None = None) -> int | None:
    """None when the node may send a batch now (and counts it); else the whole seconds
    until its window ends, for Retry-After. A cache outage lets the batch through."""
    limit = conf.node_batches_per_minute()
    if limit <= 0:
        return None
    now = timezone.now().timestamp() if now is None else now
    window = int(now // WINDOW_S)
    try:
        count = _count(f"ingest_rate_{node_id}_{window}")
    except Exception:  # noqa: BLE001 - the limit protects the server; storage matters more
        logger.warning("rate limit of node %s not counted: cache unavailable", node_id,
                       exc_info=True)
        return None
    if count <= limit:
        return None
    return max(1, (window + 1) * WINDOW_S - int(now))


def _count(key: str) -> int:
    """One more batch in `key` (made with its expiry at the window's first): the new count.
    On Redis one round trip, SET NX with its expiry and INCR in one MULTI/EXEC, where the
    cache API takes three (`add`, then `incr`'s EXISTS and INCR): every batch asks."""
    backend = caches["default"]
    if isinstance(backend, RedisCache):
        key = backend.make_and_validate_key(key)
        with _redis(settings.CACHES["default"]).pipeline(transaction=True) as pipe:
            pipe.set(key, 0, ex=2 * WINDOW_S, nx=True)
            pipe.incr(key)
            return pipe.execute()[1]
    cache.add(key, 0, timeout=2 * WINDOW_S)
    return cache.incr(key)


def _redis(config: dict):
    """A redis-py client of the default cache's server (the first of its locations, the one
    Django's cache writes to), with its socket timeouts: one per process and configuration."""
    location = config["LOCATION"]
    if isinstance(location, str):
        location = location.split(",")
    options = config.get("OPTIONS") or {}
    return _client(location[0], *(options.get(name) for name in SOCKET_OPTIONS))


SOCKET_OPTIONS = ("socket_connect_timeout", "socket_timeout")


@lru_cache(maxsize=8)
def _client(url: str, *timeouts):
    import redis  # only where the cache is Redis

    return redis.Redis.from_url(url, **dict(zip(SOCKET_OPTIONS, timeouts, strict=True)))
