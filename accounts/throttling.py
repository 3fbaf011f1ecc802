"""API request rates per user, one for personal tokens and one for browser sessions
(DRF throttles on the default cache: Redis when REDIS_URL is set, so every web
process counts together). Rates are read at each request (`API_THROTTLE_TOKEN_RATE`,
`API_THROTTLE_SESSION_RATE`, e.g. "600/min"; empty or "0" turns one off)."""

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from accounts.models import ApiToken

DEFAULT_RATES = {"token": "600/min", "session": "1200/min"}


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
        return super().allow_request(request, view)
