"""The reliability API's replays (`as_of` given, or a window other than the snapshot's)
replay the fleet's history on request: seconds of CPU on a large fleet. They are limited
per admin (`RELIABILITY_REPLAY_RATE`, default 6/min; empty or "0": no limit); the answers
from the snapshot are not counted. With the cache unreachable the limit fails open, as the
API's other throttles do (accounts/throttling.py)."""

import os

from django.conf import settings
from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

from gpuquota.reliability.snapshot import DAYS

DEFAULT_RATE = "6/min"


def is_replay(request) -> bool:
    query = request.query_params
    return bool(query.get("as_of")) or query.get("days", str(DAYS)) != str(DAYS)


class ReplayRateThrottle(SimpleRateThrottle):
    def __init__(self):  # the rate is read at each request: see allow_request
        self.rate = None

    def get_cache_key(self, request, view):
        return f"throttle_reliability_replay_{request.user.pk}"

    def allow_request(self, request, view):
        self.rate = getattr(settings, "RELIABILITY_REPLAY_RATE",
                            os.environ.get("RELIABILITY_REPLAY_RATE", DEFAULT_RATE))
        if self.rate in (None, "", "0") or not is_replay(request):
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        try:
            return super().allow_request(request, view)
        except (RedisError, OSError):
            return True
