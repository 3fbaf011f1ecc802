"""The database unreachable: every page and API request answers 503 with `Retry-After`
and a short message (the API's in its one error format), never a 500 and never a page
that needs the database to render. Raised anywhere (a view, a middleware reading the
session or the user, a template's context), Django's OperationalError or InterfaceError
ends here: the API's exception handler, the API error middleware and `handler500` all ask
`database_unavailable`."""

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string

from gpuquota.core.conf import RETRY_AFTER_S

API_PREFIX = "/api/"
MESSAGE = "The database is unavailable; retry in a moment."


def database_unavailable(exc: BaseException | None) -> bool:
    """Whether `exc` says the database could not be reached or used (connection refused or
    lost, server shutting down, timeouts), not that the request was wrong."""
    return isinstance(exc, OperationalError | InterfaceError)


def unavailable_api_body() -> dict:
    """The API's one error format for it (`code` "unavailable")."""
    return {"code": "unavailable", "detail": MESSAGE,
            "errors": [{"field": None, "message": MESSAGE}]}


def unavailable_response(request) -> HttpResponse:
    """503 with Retry-After: JSON under /api/, else the short page (rendered without a
    request context: no context processor may touch the database)."""
    if request is not None and request.path_info.startswith(API_PREFIX):
        response = JsonResponse(unavailable_api_body(), status=503)
    else:
        response = HttpResponse(render_to_string("503.html", {"retry_after_s": RETRY_AFTER_S}),
                                status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_S)
    response["Cache-Control"] = "no-store"
    return response
