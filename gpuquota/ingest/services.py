"""Node enrolment and node tokens: created, rotated and revoked by admins, audited."""

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from gpuquota.core.errors import Conflict, DomainError
from gpuquota.core.services import audit_record
from gpuquota.core.tokens import token_generate
from gpuquota.ingest.models import NodeToken
from gpuquota.inventory.models import Cluster, Node

TOKEN_KIND = "n"  # node tokens read gqn_...


@dataclass(frozen=True)
class IssuedToken:
    """A node and its new token's secret, shown once and never stored."""

    node: Node
    key: str
    prefix: str


def node_token_issue(*, node: Node, actor, enrolled_with=None) -> IssuedToken:
    """A new live token for `node` (the caller audits and revokes what must be revoked)."""
    new = token_generate(TOKEN_KIND)
    NodeToken.objects.create(node=node, prefix=new.prefix, key_hash=new.key_hash,
                             created_by=actor if getattr(actor, "is_authenticated", False)
                             else None, enrolled_with=enrolled_with)
    return IssuedToken(node=node, key=new.key, prefix=new.prefix)


def _tokens_revoke(*, node: Node) -> list[str]:
    live = NodeToken.objects.select_for_update().filter(node=node, revoked_at__isnull=True)
    prefixes = list(live.values_list("prefix", flat=True))
    live.update(revoked_at=timezone.now())
    return prefixes


@transaction.atomic
def cluster_ensure(*, name: str) -> Cluster:
    """The cluster called (or slugged) `name`, created with no scheduler if there is none."""
    name = name.strip()
    if not name or not slugify(name):
        raise DomainError("A cluster needs a name.", field="cluster")
    found = Cluster.objects.filter(slug=slugify(name)).first() or Cluster.objects.filter(
        name=name).first()
    return found or Cluster.objects.create(name=name, slug=slugify(name)[:64])


@transaction.atomic
def node_enrol(*, cluster: Cluster, hostname: str, actor) -> IssuedToken:
    """A new node in `cluster` and its first token (whose secret is returned once)."""
    hostname = hostname.strip()
    if not hostname or len(hostname) > 253 or any(c.isspace() for c in hostname):
        raise DomainError("A hostname has 1 to 253 characters and no spaces.", field="hostname")
    if Node.objects.filter(cluster=cluster, hostname=hostname).exists():
        raise Conflict(f"{cluster.slug}/{hostname} is already enrolled; rotate its token instead.",
                       field="hostname")
    node = Node.objects.create(cluster=cluster, hostname=hostname)
    issued = node_token_issue(node=node, actor=actor)
    audit_record(actor=actor, action="node.enrol", obj=node,
                 changes={"cluster": cluster.slug, "hostname": hostname,
                          "token_prefix": issued.prefix})
    return issued


@transaction.atomic
def node_token_rotate(*, node: Node, actor) -> IssuedToken:
    """A new token for `node`; every token it had is revoked at once."""
    revoked = _tokens_revoke(node=node)
    issued = node_token_issue(node=node, actor=actor)
    audit_record(actor=actor, action="node.token_rotate", obj=node,
                 changes={"revoked_prefixes": revoked, "token_prefix": issued.prefix})
    return issued


@transaction.atomic
def node_token_revoke(*, node: Node, actor, reason: str = "") -> int:
    """Revoke every live token of `node` (its agent gets 401 from now on); returns how many."""
    revoked = _tokens_revoke(node=node)
    audit_record(actor=actor, action="node.token_revoke", obj=node,
                 changes={"revoked_prefixes": revoked}, reason=reason)
    return len(revoked)
