"""What the telemetry importer adds to the pages of others (`gpuquota.core.contributions`):
its sources on the fleet page (source per node, lag, problems), /metrics, and failing
sources on the admin's home page."""

from datetime import datetime

from django.urls import reverse

from accounts.permissions import is_admin
from gpuquota.core.attention import Attention
from gpuquota.core.sections import Section
from gpuquota.telemetry.metrics import TelemetryCollector
from gpuquota.telemetry.models import TelemetrySource
from gpuquota.telemetry.selectors import failing_sources, sources_status


def fleet_sources_context(*, user, now: datetime):
    statuses = sources_status(now=now)
    if not statuses:
        return None  # every node reports through its agent: nothing to add
    return {"telemetry_statuses": statuses, "telemetry_admin": is_admin(user)}


def telemetry_attention(now: datetime) -> list[Attention]:
    """Failing sources; nothing at all where no source is configured."""
    if not TelemetrySource.objects.filter(enabled=True).exists():
        return []
    failing = failing_sources()
    return [Attention(key="telemetry_failing", label="Failing telemetry sources",
                      count=len(failing), url=reverse("telemetry_sources"), order=65,
                      detail="; ".join(s.name for s in failing[:3]))]


PAGE_SECTIONS = [
    Section(page="fleet", slot="figures", template="telemetry/_fleet_sources.html",
            context=fleet_sources_context, order=30),
]
METRICS_COLLECTORS = [TelemetryCollector()]
ATTENTION = [telemetry_attention]
