"""Bootstrap enrolment: the agent's `POST /api/v1/agent/enrol` and the admins' page for a
cluster's bootstrap secret (agent-enrolment.md)."""

import json
import logging

from django.contrib import messages
from django.db import InterfaceError, OperationalError
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from accounts.permissions import require_admin
from gpuquota.core.errors import DomainError
from gpuquota.ingest.bootstrap import (
    bootstrap_live,
    bootstrap_secret_revoke,
    bootstrap_secret_rotate,
    node_enrol_bootstrap,
)
from gpuquota.ingest.views import (
    STORAGE_RETRY_AFTER_S,
    error_response,
    unauthorized_response,
)
from gpuquota.inventory.models import Cluster

logger = logging.getLogger(__name__)
NEW_SECRET_SESSION_KEY = "ingest_new_bootstrap"
MAX_ENROL_BODY_BYTES = 4096


@never_cache  # the answer carries the node's token
@csrf_exempt
@require_POST
def agent_enrol(request):
    """POST /api/v1/agent/enrol: `Authorization: Bearer <bootstrap secret>`, a JSON body
    `{"node_name": ...}`; 201 with the node's own token, once."""
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return unauthorized_response(
            "A bootstrap secret is required: Authorization: Bearer <secret>.")
    raw = request.read(MAX_ENROL_BODY_BYTES + 1)
    try:
        body = json.loads(raw) if len(raw) <= MAX_ENROL_BODY_BYTES else None
    except ValueError:
        body = None
    node_name = body.get("node_name") if isinstance(body, dict) else None
    if not isinstance(node_name, str):
        return error_response(400, "invalid", "The body is a JSON object with a node_name string.",
                      [{"field": "node_name", "message": "required, a string"}])
    try:
        issued = node_enrol_bootstrap(key=key.strip(), node_name=node_name)
    except DomainError as exc:
        if exc.status_code == 401:
            return unauthorized_response(exc.message)
        return error_response(exc.status_code, exc.code, exc.message,
                      [{"field": exc.field or "node_name", "message": exc.message}])
    except (OperationalError, InterfaceError):
        logger.exception("database unavailable during an enrolment")
        return error_response(503, "unavailable", "Storage is unavailable; enrol again later.",
                      Retry_After=str(STORAGE_RETRY_AFTER_S))
    return JsonResponse({"node": issued.node.hostname, "cluster": issued.node.cluster.slug,
                         "token": issued.key, "token_prefix": issued.prefix}, status=201)


@never_cache  # shows a new bootstrap secret once: no browser or proxy may keep a copy
def cluster_bootstrap(request, slug: str):
    """Admins: a cluster's bootstrap secret (prefix and age), rotate or revoke it."""
    require_admin(request.user)
    cluster = get_object_or_404(Cluster, slug=slug)
    return render(request, "ingest/bootstrap.html", {
        "cluster": cluster, "live": bootstrap_live(cluster=cluster),
        "new_secret": request.session.pop(NEW_SECRET_SESSION_KEY, None),
    })


@never_cache
@require_POST
def cluster_bootstrap_rotate(request, slug: str):
    require_admin(request.user)
    issued = bootstrap_secret_rotate(cluster=get_object_or_404(Cluster, slug=slug),
                                     actor=request.user)
    request.session[NEW_SECRET_SESSION_KEY] = issued.key
    messages.success(request, f"New bootstrap secret for {issued.cluster}; the old one no "
                              "longer enrols.")
    return redirect("ingest_cluster_bootstrap", slug=slug)


@never_cache
@require_POST
def cluster_bootstrap_revoke(request, slug: str):
    require_admin(request.user)
    count = bootstrap_secret_revoke(cluster=get_object_or_404(Cluster, slug=slug),
                                    actor=request.user)
    messages.success(request, f"Revoked {count} bootstrap secret(s).")
    return redirect("ingest_cluster_bootstrap", slug=slug)
