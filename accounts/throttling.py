"""API request rates per user, one for personal tokens and one for browser sessions
(DRF throttles on the default cache: Redis when REDIS_URL is set, so every web
process counts together). Rates are read at each request (`API_THROTTLE_TOKEN_RATE`,
`API_THROTTLE_SESSION_RATE`, e.g. "600/min"; empty or "0" turns one off).

With the cache unreachable (Redis stopped, restarting or frozen) the throttle fails open:
the request is let through uncounted and a warning is logged (once a minute per process).
The API keeps answering, as the pages and the agent endpoint do; the rates protect the
server from a runaway script, which matters less than serving everyone during an outage."""

import logging
import time

from django.conf import settings
from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

from accounts.models import ApiToken

logger = logging.getLogger(__name__)
DEFAULT_RATES = {"token": "600/min", "session": "1200/min"}
OUTAGE_WARNING_EVERY_S = 60
_last_outage_warning = [float("-inf")]  # monotonic time of this process's last warning


def _warn_cache_unavailable(exc: Exception) -> None:
    now = time.monotonic()
    if now - _last_outage_warning[0] >= OUTAGE_WARNING_EVERY_S:
        _last_outage_warning[0] = now
        logger.warning("API throttling is off: the cache is unavailable (%s: %s); requests "
                       "are let through uncounted until it is back", type(exc).__name__, exc)


def api_rate(kind: str) -> str | None:
    """The configured rate of `kind` ("token" or "session"), None when off."""
    rate = getattr(settings, f"API_THROTTLE_{kind.upper()}_RATE", DEFAULT_RATES[kind])
    return None if rate in (None, "", "0") else rate


class ApiUserRateThrottle(SimpleRateThrottle):
    """Requests per user and kind of authentication; anonymous requests are refused
    before throttling (every endpoint needs a login)."""

    def __init__(self):  # the rate depends on the request: see allow_request
        self.rate = None

    def _kind(self, request) -> str:
        return "token" if isinstance(request.auth, ApiToken) else "session"

    def get_cache_key(self, request, view):
        if not request.user or not request.user.is_authenticated:
            return None
        return f"throttle_api_{self._kind(request)}_{request.user.pk}"

    def allow_request(self, request, view):
        self.rate = api_rate(self._kind(request))
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        try:
            return super().allow_request(request, view)
        except (RedisError, OSError) as exc:
            _warn_cache_unavailable(exc)
            return True
