"""What ingestion tells the platform admins' channels (`gpuquota.core.contributions.admin_event`):
a GPU whose health turned `failed`, whether or not a reservation holds it (a team holding it
hears of the drain that follows, from reliability)."""

from datetime import datetime

from django.urls import reverse

from gpuquota.core.contributions import admin_event
from gpuquota.inventory.models import Gpu
from gpuquota.mail.conf import base_url
from gpuquota.outbox.render import Message, when_utc


def gpu_failed_tell(*, gpu: Gpu, at: datetime, reason: str, until: datetime | None) -> None:
    """In the transaction that opens a failed interval of `gpu` at `at`: the admins' channels
    hear of it, once per GPU and failure instant."""
    where = f"{gpu.node.hostname}/{gpu.index}"
    facts = [("GPU", f"{where} ({gpu.uuid})"), ("Cluster", gpu.node.cluster.name),
             ("Failed at", when_utc(at)), ("Why", reason or "unknown")]
    if until is not None:
        facts.append(("Back at", when_utc(until)))
    admin_event(key=f"gpu:{gpu.pk}:failed:{at.isoformat()}", message=Message(
        event="gpu.failed", title=f"GPU {where} failed",
        text=f"GPU {where} of {gpu.node.cluster.name} failed at {when_utc(at)}: "
             f"{reason or 'unknown'}.",
        facts=facts, link=base_url() + reverse("gpu_detail", args=[gpu.uuid]),
        data={"gpu": gpu.uuid, "node": gpu.node.hostname, "cluster": gpu.node.cluster.slug,
              "at": at.isoformat(), "reason": reason,
              "until": until.isoformat() if until else None}))
