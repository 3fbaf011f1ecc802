"""Reads of the ingestion app: who a node token is, and the nodes page."""

from django.db import connection
from django.db.models import Prefetch

from gpuquota.core.tokens import token_hash
from gpuquota.ingest import conf
from gpuquota.ingest.models import NodeToken
from gpuquota.inventory.models import Node


def node_for_token(*, key: str) -> Node | None:
    """The node a live (not revoked) token authenticates, or None."""
    if not key.startswith("gqn_"):
        return None
    # Raw SQL: every batch asks, and the ORM's query building costs more than the query.
    quote = connection.ops.quote_name
    columns = ", ".join(f"n.{quote(f.column)}" for f in Node._meta.concrete_fields)
    found = Node.objects.raw(
        f"SELECT {columns} FROM {Node._meta.db_table} n JOIN {NodeToken._meta.db_table} t "
        "ON t.node_id = n.id WHERE t.key_hash = %s AND t.revoked_at IS NULL",
        [token_hash(key)])
    return next(iter(found), None)  # a hash is unique: one token at most


def nodes_overview() -> list[Node]:
    """Every node with its live tokens (`live_tokens`) and a clock-skew flag (`skew_flagged`)."""
    live = NodeToken.objects.filter(revoked_at__isnull=True).order_by("-created_at")
    nodes = list(Node.objects.select_related("cluster")
                 .prefetch_related(Prefetch("tokens", queryset=live, to_attr="live_tokens")))
    for node in nodes:
        node.skew_flagged = (node.clock_skew_s is not None
                             and abs(node.clock_skew_s) > conf.CLOCK_SKEW_THRESHOLD_S)
    return nodes
