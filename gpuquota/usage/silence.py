"""Silent nodes, told once: the silence scan (beat, every minute) opens a `NodeSilence`
for each node whose agent has not reported for AGENT_SILENT_AFTER_S (or, never having
reported, was enrolled that long ago) and tells the admins' channels (`node.silent`), and
closes it, telling them again (`node.reporting`), once the node has reported since. One
open silence per node (a constraint), so a second scan, or two at once, tells nothing
more."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q
from django.urls import reverse

from gpuquota.core.contributions import admin_event
from gpuquota.inventory.models import Node
from gpuquota.mail.conf import base_url
from gpuquota.outbox.render import Message, when_utc
from gpuquota.usage.conf import agent_silent_after_s
from gpuquota.usage.models import NodeSilence


@dataclass
class SilenceScan:
    silent: list[int] = field(default_factory=list)  # nodes newly silent
    reporting: list[int] = field(default_factory=list)  # nodes reporting again


def _since(silence: NodeSilence) -> str:
    return when_utc(silence.last_seen_at) if silence.last_seen_at else "never reported"


def _tell(silence: NodeSilence, *, event: str, now: datetime) -> None:
    node = silence.node
    silent_s = agent_silent_after_s()
    if event == "node.silent":
        title = f"Node {node.hostname} silent"
        text = (f"The agent of {node.hostname} ({node.cluster.name}) has not reported for "
                f"{silent_s} s: last report {_since(silence)}. Its GPUs' usage is not "
                "recorded until it reports again.")
    else:
        title = f"Node {node.hostname} reports again"
        text = (f"The agent of {node.hostname} ({node.cluster.name}) reported at "
                f"{when_utc(silence.ended_at)} after a silence since {_since(silence)}.")
    facts = [("Node", f"{node.cluster.slug}/{node.hostname}"),
             ("Last report before", _since(silence)), ("Noticed", when_utc(now))]
    admin_event(key=f"node-silence:{silence.pk}:{event}", message=Message(
        event=event, title=title, text=text, facts=facts,
        link=base_url() + reverse("node_detail", args=[node.pk]),
        data={"node": node.hostname, "cluster": node.cluster.slug,
              "last_seen_at": silence.last_seen_at.isoformat() if silence.last_seen_at
              else None,
              "reported_at": silence.ended_at.isoformat() if silence.ended_at else None}))


def node_silences_scan(*, now: datetime) -> SilenceScan:
    """Open a silence for every node newly silent and close those whose node reported
    since, telling the admins' channels of each once; idempotent."""
    cutoff = now - timedelta(seconds=agent_silent_after_s())
    done = SilenceScan()
    open_nodes = NodeSilence.objects.filter(ended_at__isnull=True).values("node_id")
    silent = (Node.objects.filter(Q(last_seen_at__lt=cutoff)
                                  | Q(last_seen_at__isnull=True, created_at__lt=cutoff))
              .exclude(id__in=open_nodes).select_related("cluster"))
    for node in silent:
        with transaction.atomic():
            silence, created = NodeSilence.objects.get_or_create(
                node=node, ended_at=None,
                defaults={"last_seen_at": node.last_seen_at, "noticed_at": now})
            if created:
                _tell(silence, event="node.silent", now=now)
                done.silent.append(node.pk)
    back = (NodeSilence.objects.filter(ended_at__isnull=True, node__last_seen_at__isnull=False)
            .filter(Q(last_seen_at__isnull=True) | Q(node__last_seen_at__gt=F("last_seen_at")))
            .select_related("node__cluster"))
    for silence in back:
        with transaction.atomic():
            ended = NodeSilence.objects.filter(pk=silence.pk, ended_at__isnull=True).update(
                ended_at=silence.node.last_seen_at)
            if ended:
                silence.ended_at = silence.node.last_seen_at
                _tell(silence, event="node.reporting", now=now)
                done.reporting.append(silence.node_id)
    return done
