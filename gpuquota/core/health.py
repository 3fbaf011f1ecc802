"""Liveness and readiness for load balancers, Kubernetes and compose.

`/healthz` (liveness): the process answers; it reads nothing, so a database outage never
gets a healthy web process restarted. `/readyz` (readiness): the database answers a query
within its connect timeout (503 with Retry-After otherwise: take this process out of the
load balancer), and the broker's state is reported beside it. An unreachable broker does not
make the process unready: pages, the API and the agents' batches are all served without it
(work waits in the outbox, `docs/faults.md`), and a shared broker's outage must not take
every web process out of service at once."""

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache

from gpuquota.core.conf import RETRY_AFTER_S


@never_cache
def healthz(_request):
    """Liveness: the process answers."""
    return HttpResponse("ok", content_type="text/plain")


def _database_state() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return f"unavailable: {type(exc).__name__}"
    return "ok"


def _broker_state() -> str:
    url = getattr(settings, "CELERY_BROKER_URL", "")
    if getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False) or not url:
        return "none: tasks run in the web process"
    if not url.startswith(("redis://", "rediss://")):
        return "not checked"
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping()
    except (redis.RedisError, OSError) as exc:
        return f"unavailable: {type(exc).__name__}"
    return "ok"


@never_cache
def readyz(_request):
    """Readiness: 200 when the database answers, else 503 with Retry-After; the body
    names each dependency's state (never an address or a message from it)."""
    checks = {"database": _database_state(), "broker": _broker_state()}
    ready = checks["database"] == "ok"
    response = JsonResponse({"ready": ready, "checks": checks}, status=200 if ready else 503)
    if not ready:
        response["Retry-After"] = str(RETRY_AFTER_S)
    return response
