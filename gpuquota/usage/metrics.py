"""Prometheus metrics, computed from the database at each scrape."""

import hmac
import ipaddress
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from gpuquota.core.contributions import contributed
from gpuquota.ingest.models import Sample
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.usage import conf
from gpuquota.usage.fleet import nodes_nvml_unavailable_count, nodes_silent_count

CELERY_QUEUE = "celery"


def celery_queue_depth() -> int | None:
    """Messages waiting in the Celery queue (Redis list length); None without Redis."""
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return None
    import redis

    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        return int(client.llen(CELERY_QUEUE))
    except redis.RedisError:
        return None
    finally:
        client.close()


class UsageCollector:
    """Ingest rate, outbox lag, queue depth, silent agents, failed GPUs."""

    def collect(self):
        now = timezone.now()
        recent = Sample.objects.filter(
            received_at__gte=now - timedelta(minutes=5),
            window_start__gte=now - timedelta(days=1),  # prunes partitions
        ).count()
        yield GaugeMetricFamily("gpuquota_samples_stored_5m",
                                "Samples stored in the last 5 minutes", value=recent)
        outbox = DirtyGpuHour.objects.aggregate(count=Count("id"), oldest=Min("marked_at"))
        yield GaugeMetricFamily("gpuquota_outbox_dirty_gpu_hours",
                                "GPU-hours waiting for a rollup recompute", value=outbox["count"])
        lag = (now - outbox["oldest"]).total_seconds() if outbox["oldest"] else 0
        yield GaugeMetricFamily("gpuquota_outbox_lag_seconds",
                                "Age of the oldest dirty GPU-hour mark", value=max(0.0, lag))
        depth = celery_queue_depth()
        if depth is not None:
            yield GaugeMetricFamily("gpuquota_celery_queue_depth",
                                    "Messages waiting in the Celery queue", value=depth)
        yield GaugeMetricFamily("gpuquota_agents_silent",
                                "Nodes whose agent is silent past AGENT_SILENT_AFTER_S",
                                value=nodes_silent_count(now=now))
        yield GaugeMetricFamily("gpuquota_nodes_nvml_unavailable",
                                "Nodes whose agent reports but NVML cannot answer",
                                value=nodes_nvml_unavailable_count(now=now))
        failed = GpuHealthInterval.objects.filter(
            state=GpuHealthInterval.State.FAILED, valid_from__lte=now, valid_until__isnull=True
        ).count()
        yield GaugeMetricFamily("gpuquota_gpus_failed", "GPUs failed now", value=failed)


def metrics_render() -> bytes:
    """The exposition text of one scrape: usage's gauges, then those the apps built on it
    contribute (`METRICS_COLLECTORS`, `gpuquota.core.contributions`)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(UsageCollector())
    for collector in contributed("METRICS_COLLECTORS"):
        registry.register(collector)
    return generate_latest(registry)


def _networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    try:
        return [ipaddress.ip_network(item, strict=False)
                for item in conf.metrics_allowed_networks()]
    except ValueError as exc:
        raise ImproperlyConfigured(f"METRICS_ALLOWED_NETWORKS: {exc}") from exc


def _address_allowed(client_ip: str) -> bool:
    try:
        address = ipaddress.ip_address(client_ip)
    except ValueError:
        return False
    return any(address in network for network in _networks())


def metrics_access(*, authorization: str, client_ip: str) -> int:
    """Whether a scrape may read the metrics: 200 (the configured bearer token, or a
    client in an allowed network), 401 (a token is configured and this is not it),
    403 (only networks are configured and this client is outside them) or 404 (no
    token and no network configured: metrics are off)."""
    token = conf.metrics_token()
    networks = _networks()
    if not token and not networks:
        return 404
    scheme, _, given = authorization.partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), token.encode()):
        return 200
    if _address_allowed(client_ip):
        return 200
    return 401 if token else 403
