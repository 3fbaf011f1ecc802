"""The agents' batch endpoint served past the browser's middleware.

An agent authenticates by its node token and is answered JSON: the session, CSRF, user,
message, time zone, Content-Security-Policy, error page and login lockout middleware below
this one have nothing to do for it, and cost a steady-state batch a quarter of its CPU
(docs/benchmarks.md). Placed after `SecurityMiddleware` (HTTPS redirect, HSTS) and
`ApiErrorMiddleware` (JSON errors under /api/), which it keeps; a middleware that returns
its view's response itself is Django's documented short-circuit."""

from gpuquota.ingest.urls import AGENT_BATCHES_PATH
from gpuquota.ingest.views import agent_batches


class AgentEndpointMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path_info == AGENT_BATCHES_PATH:
            return agent_batches(request)
        return self.get_response(request)
