"""Reads of the ingestion app: who a node token is, and the nodes page."""

from django.db import connection
from django.db.models import Prefetch

from gpuquota.core.tokens import token_hash
from gpuquota.ingest import conf
from gpuquota.ingest.models import NodeToken
from gpuquota.inventory.models import Node

_TOKEN_SQL = (
    "SELECT " + ", ".join(f'n."{f.column}"' for f in Node._meta.concrete_fields)
    + f" FROM {Node._meta.db_table} n JOIN {NodeToken._meta.db_table} t ON t.node_id = n.id"
    " WHERE t.key_hash = %s AND t.revoked_at IS NULL")
_NODE_ATTNAMES = [f.attname for f in Node._meta.concrete_fields]
_node_converters: dict[str, list[tuple]] = {}


def _converters() -> list[tuple]:
    """Each Node column with what turns its database value into the field's (the backend's
    datetime parsing on SQLite, say), as a query set applies them."""
    found = _node_converters.get(connection.vendor)
    if found is None:
        columns = [field.get_col(Node._meta.db_table) for field in Node._meta.concrete_fields]
        found = _node_converters[connection.vendor] = [
            (column, connection.ops.get_db_converters(column)
             + column.get_db_converters(connection)) for column in columns]
    return found


def node_for_token(*, key: str) -> Node | None:
    """The node a live (not revoked) token authenticates, or None."""
    if not key.startswith("gqn_"):
        return None
    # Raw SQL and `from_db`: every batch asks, and a query set costs more than the query.
    with connection.cursor() as cursor:
        cursor.execute(_TOKEN_SQL, [token_hash(key)])
        row = cursor.fetchone()  # a hash is unique: one token at most
    if row is None:
        return None
    values = []
    for value, (column, converters) in zip(row, _converters(), strict=True):
        for converter in converters:
            value = converter(value, column, connection)
        values.append(value)
    return Node.from_db(connection.alias, _NODE_ATTNAMES, values)


def nodes_overview() -> list[Node]:
    """Every node with its live tokens (`live_tokens`) and a clock-skew flag (`skew_flagged`)."""
    live = NodeToken.objects.filter(revoked_at__isnull=True).order_by("-created_at")
    nodes = list(Node.objects.select_related("cluster")
                 .prefetch_related(Prefetch("tokens", queryset=live, to_attr="live_tokens")))
    for node in nodes:
        node.skew_flagged = (node.clock_skew_s is not None
                             and abs(node.clock_skew_s) > conf.CLOCK_SKEW_THRESHOLD_S)
    return nodes
