"""Reads of the ingestion app: who a node token is, and the nodes page."""

from django.db.models import Prefetch

from gpuquota.core.tokens import token_hash
from gpuquota.ingest import conf
from gpuquota.ingest.models import NodeToken
from gpuquota.inventory.models import Node


def node_for_token(*, key: str) -> Node | None:
    """The node a live (not revoked) token authenticates, or None."""
    if not key.startswith("gqn_"):
        return None
    token = (NodeToken.objects.select_related("node")
             .filter(key_hash=token_hash(key), revoked_at__isnull=True).first())
    return token.node if token else None


def nodes_overview() -> list[Node]:
    """Every node with its live tokens (`live_tokens`) and a clock-skew flag (`skew_flagged`)."""
    live = NodeToken.objects.filter(revoked_at__isnull=True).order_by("-created_at")
    nodes = list(Node.objects.select_related("cluster")
                 .prefetch_related(Prefetch("tokens", queryset=live, to_attr="live_tokens")))
    for node in nodes:
        node.skew_flagged = (node.clock_skew_s is not None
                             and abs(node.clock_skew_s) > conf.CLOCK_SKEW_THRESHOLD_S)
    return nodes
