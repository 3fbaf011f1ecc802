"""Prometheus metrics, computed from the database at each scrape."""

from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from gpuquota.ingest.models import Sample
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.usage.fleet import nodes_silent_count
from gpuquota.usage.models import DirtyGpuHour
from reclaim.metrics import ReclaimCollector

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
        failed = GpuHealthInterval.objects.filter(
            state=GpuHealthInterval.State.FAILED, valid_from__lte=now, valid_until__isnull=True
        ).count()
        yield GaugeMetricFamily("gpuquota_gpus_failed", "GPUs failed now", value=failed)


def metrics_render() -> bytes:
    """The exposition text of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(UsageCollector())
    registry.register(ReclaimCollector())
    return generate_latest(registry)
