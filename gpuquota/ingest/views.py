"""The agent endpoint (a plain Django view: node tokens, not user auth) and the nodes page."""

import logging

from django import forms
from django.contrib import messages
from django.db import InterfaceError, OperationalError
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from accounts.permissions import require_admin
from gpuquota.core.errors import DomainError
from gpuquota.core.gcpause import collector_paused
from gpuquota.ingest import conf
from gpuquota.ingest.batches import batch_ingest
from gpuquota.ingest.protocol import ProtocolError, batch_parse
from gpuquota.ingest.ratelimit import node_batch_wait_s
from gpuquota.ingest.selectors import node_for_token, nodes_overview
from gpuquota.ingest.services import (
    cluster_ensure,
    node_enrol,
    node_token_revoke,
    node_token_rotate,
)
from gpuquota.inventory.models import Cluster, Node

logger = logging.getLogger(__name__)
NEW_TOKEN_SESSION_KEY = "ingest_new_token"
STORAGE_RETRY_AFTER_S = 30


def error_response(status: int, code: str, detail: str, errors=(), **headers) -> JsonResponse:
    response = JsonResponse({"code": code, "detail": detail, "errors": list(errors)},
                            status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def unauthorized_response(detail: str) -> JsonResponse:
    return error_response(401, "not_authenticated", detail,
                  WWW_Authenticate='Bearer realm="gpuquota-agent"')


@csrf_exempt
@require_POST
def agent_batches(request):
    """POST /api/v1/agent/batches (agent-protocol.md). With the database unreachable, from
    the token lookup on, the answer is the protocol's 503 with Retry-After: the agent keeps
    the batch in its spool and resends it."""
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return unauthorized_response("A node token is required: Authorization: Bearer <token>.")
    try:
        return _batch_receive(request, key=key.strip())
    except (OperationalError, InterfaceError):
        logger.exception("database unavailable while receiving a batch")
        return error_response(503, "unavailable", "Storage is unavailable; resend later.",
                      Retry_After=str(STORAGE_RETRY_AFTER_S))


def _batch_receive(request, *, key: str) -> JsonResponse:
    node = node_for_token(key=key)
    if node is None:
        return unauthorized_response("Unknown or revoked node token.")
    wait_s = node_batch_wait_s(node_id=node.pk)
    if wait_s is not None:
        limit = conf.node_batches_per_minute()
        return error_response(429, "throttled", f"Over {limit} batches a minute; resend later.",
                      [{"field": "node", "message": f"retry after {wait_s} s"}],
                      Retry_After=str(wait_s))
    raw = request.read(conf.MAX_BODY_BYTES + 1)
    if len(raw) > conf.MAX_BODY_BYTES:
        return error_response(413, "too_large", f"The body is over {conf.MAX_BODY_BYTES} bytes.",
                      [{"field": "body", "message": f"more than {conf.MAX_BODY_BYTES} bytes"}])
    try:
        # A batch is thousands of small containers and no cycles: no collection walks them.
        with collector_paused():
            body = batch_parse(raw, content_encoding=request.headers.get("Content-Encoding", ""),
                               idempotency_key=request.headers.get("Idempotency-Key"))
            result = batch_ingest(node=node, body=body,
                                  now=timezone.now().replace(microsecond=0))
    except ProtocolError as refusal:
        return JsonResponse(refusal.body(), status=refusal.status)
    return JsonResponse(result.body, status=result.status)


class NodeCreateForm(forms.Form):
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.all(), required=False)
    new_cluster = forms.CharField(max_length=120, required=False,
                                  help_text="Or the name of a new cluster.")
    hostname = forms.CharField(max_length=253)

    def clean(self):
        data = super().clean()
        if not data.get("cluster") and not (data.get("new_cluster") or "").strip():
            raise forms.ValidationError("Choose a cluster or name a new one.")
        return data


def _show_token_once(request, issued) -> None:
    request.session[NEW_TOKEN_SESSION_KEY] = {"node": str(issued.node), "key": issued.key}


@never_cache  # shows a new node token's secret once: no browser or proxy may keep a copy
def nodes(request):
    """Admins: every node, its live token prefixes, last seen, clock skew; enrol a node."""
    require_admin(request.user)
    form = NodeCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            cluster = form.cleaned_data["cluster"] or cluster_ensure(
                name=form.cleaned_data["new_cluster"])
            issued = node_enrol(cluster=cluster, hostname=form.cleaned_data["hostname"],
                                actor=request.user)
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            _show_token_once(request, issued)
            messages.success(request, f"Node {issued.node} enrolled.")
            return redirect("ingest_nodes")
    return render(request, "ingest/nodes.html", {
        "nodes": nodes_overview(), "form": form, "clusters": Cluster.objects.all(),
        "new_token": request.session.pop(NEW_TOKEN_SESSION_KEY, None),
        "skew_threshold_s": conf.CLOCK_SKEW_THRESHOLD_S,
    })


@require_POST
def node_rotate(request, pk: int):
    require_admin(request.user)
    issued = node_token_rotate(node=get_object_or_404(Node, pk=pk), actor=request.user)
    _show_token_once(request, issued)
    messages.success(request, f"New token for {issued.node}; the old one no longer works.")
    return redirect("ingest_nodes")


@require_POST
def node_revoke(request, pk: int):
    require_admin(request.user)
    node = get_object_or_404(Node, pk=pk)
    count = node_token_revoke(node=node, actor=request.user)
    messages.success(request, f"Revoked {count} token(s) of {node}.")
    return redirect("ingest_nodes")
