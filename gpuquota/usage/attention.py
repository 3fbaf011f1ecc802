"""What the fleet puts on the admin's home page (`gpuquota.core.attention`): failed GPUs
and nodes whose agent has gone silent, linked to the fleet page filtered to them."""

from datetime import datetime

from django.db.models import Q
from django.urls import reverse

from gpuquota.core.attention import Attention
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.usage.fleet import nodes_silent_count


def fleet_attention(now: datetime) -> list[Attention]:
    """GPUs in service that are failed now, and nodes silent past AGENT_SILENT_AFTER_S."""
    failed = (GpuHealthInterval.objects
              .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=now),
                      state=GpuHealthInterval.State.FAILED, valid_from__lte=now)
              .filter(Q(gpu__retired_at__isnull=True) | Q(gpu__retired_at__gt=now))
              .values("gpu_id").distinct().count())
    fleet = reverse("fleet")
    return [
        Attention(key="failed_gpus", label="Failed GPUs", count=failed,
                  url=f"{fleet}?health=failed", order=50,
                  detail="record a recovery on the GPU's page once it is repaired"
                  if failed else ""),
        Attention(key="silent_nodes", label="Silent nodes", count=nodes_silent_count(now=now),
                  url=f"{fleet}?problems=1", order=60,
                  detail="no report from their agent lately"),
    ]
