"""Bootstrap enrolment (agent-enrolment.md): a per-cluster secret lets a node's agent enrol
itself once and receive its own node token. The secret can only enrol, never report."""

import re
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.services import audit_record
from gpuquota.core.tokens import token_generate, token_hash
from gpuquota.ingest.models import BootstrapSecret, NodeToken
from gpuquota.ingest.services import IssuedToken, node_token_issue
from gpuquota.inventory.models import Cluster, Node

BOOTSTRAP_KIND = "b"  # bootstrap secrets read gqb_...
# A Kubernetes node name: a DNS-1123 subdomain (lower case, digits, '-' and '.').
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class BootstrapRefused(DomainError):
    """The bootstrap secret is unknown or revoked: the agent gets a 401."""

    status_code = 401
    code = "not_authenticated"


@dataclass(frozen=True)
class IssuedBootstrap:
    """A cluster's new bootstrap secret, shown once and never stored."""

    cluster: Cluster
    key: str
    prefix: str


def bootstrap_live(*, cluster: Cluster) -> BootstrapSecret | None:
    """The cluster's live bootstrap secret (its prefix and age; never the secret), if any."""
    return BootstrapSecret.objects.filter(cluster=cluster, revoked_at__isnull=True).first()


def _revoke_live(*, cluster: Cluster) -> list[str]:
    live = BootstrapSecret.objects.select_for_update().filter(cluster=cluster,
                                                              revoked_at__isnull=True)
    prefixes = list(live.values_list("prefix", flat=True))
    live.update(revoked_at=timezone.now())
    return prefixes


@transaction.atomic
def bootstrap_secret_rotate(*, cluster: Cluster, actor) -> IssuedBootstrap:
    """A new bootstrap secret for `cluster`; the one it had stops enrolling at once. Nodes
    already enrolled keep their own tokens."""
    revoked = _revoke_live(cluster=cluster)
    new = token_generate(BOOTSTRAP_KIND)
    BootstrapSecret.objects.create(
        cluster=cluster, prefix=new.prefix, key_hash=new.key_hash,
        created_by=actor if getattr(actor, "is_authenticated", False) else None)
    audit_record(actor=actor, action="cluster.bootstrap_rotate", obj=cluster,
                 changes={"revoked_prefixes": revoked, "prefix": new.prefix})
    return IssuedBootstrap(cluster=cluster, key=new.key, prefix=new.prefix)


@transaction.atomic
def bootstrap_secret_revoke(*, cluster: Cluster, actor) -> int:
    """Revoke the cluster's bootstrap secret (no node can enrol itself until a rotation)."""
    revoked = _revoke_live(cluster=cluster)
    audit_record(actor=actor, action="cluster.bootstrap_revoke", obj=cluster,
                 changes={"revoked_prefixes": revoked})
    return len(revoked)


def _node_name_check(node_name: str) -> str:
    if len(node_name) > 253 or not NODE_NAME.fullmatch(node_name):
        raise DomainError("A node name is a DNS-1123 subdomain: at most 253 lower-case letters, "
                          "digits, '-' and '.'.", field="node_name")
    return node_name


@transaction.atomic
def node_enrol_bootstrap(*, key: str, node_name: str) -> IssuedToken:
    """Enrol `node_name` in the bootstrap secret's cluster and issue its own node token,
    once: a node that has a token (live or revoked) is refused, so a replayed or second
    enrolment never yields another token, and a revoked node stays out."""
    secret = None
    if key.startswith(f"gq{BOOTSTRAP_KIND}_"):
        # The row lock serialises a cluster's enrolments (two agents racing for one name).
        secret = (BootstrapSecret.objects.select_for_update().select_related("cluster")
                  .filter(key_hash=token_hash(key), revoked_at__isnull=True).first())
    if secret is None:
        raise BootstrapRefused("Unknown or revoked bootstrap secret.", field="authorization")
    node_name = _node_name_check(node_name)
    node = Node.objects.filter(cluster=secret.cluster, hostname=node_name).first()
    if node is not None:
        tokens = NodeToken.objects.filter(node=node)
        if tokens.filter(revoked_at__isnull=True).exists():
            raise Conflict(f"{node} is already enrolled: an enrolment is answered once. An "
                           "admin rotates its token if the agent lost it.", field="node_name")
        if tokens.exists():
            raise PermissionDenied(f"{node}'s token was revoked: only an admin can let it "
                                   "back in (rotate its token on the nodes page).",
                                   field="node_name")
    else:
        node = Node.objects.create(cluster=secret.cluster, hostname=node_name)
    issued = node_token_issue(node=node, actor=None, enrolled_with=secret)
    audit_record(actor=None, action="node.enrol_bootstrap", obj=node,
                 changes={"cluster": secret.cluster.slug, "hostname": node_name,
                          "bootstrap_prefix": secret.prefix, "token_prefix": issued.prefix})
    return issued
