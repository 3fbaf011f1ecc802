"""Everything under /api/ answers in the one JSON error format (gpuquota.core.api).

Django answers some failures before or around the API views with HTML: an unknown
path (404), a method a plain view refuses (405), a body over
DATA_UPLOAD_MAX_MEMORY_SIZE (RequestDataTooBig), too many form fields
(TooManyFieldsSent), an unhandled exception (500; an unreachable database: 503 with
Retry-After). This middleware gives all of them the JSON format, and refuses NUL
characters in the query string of any page (the database cannot hold them; a 400 naming
the parameter, not a 500 in a query).
"""

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import HttpResponse, JsonResponse

from gpuquota.core.api import error_body
from gpuquota.core.parsers import NUL, NUL_MESSAGE
from gpuquota.core.unavailable import database_unavailable, unavailable_response

logger = logging.getLogger("django.request")
API_PREFIX = "/api/"
# Headers of an HTML error response worth keeping on its JSON replacement.
KEPT_HEADERS = ("Allow", "Retry-After", "WWW-Authenticate")
REASONS = {
    400: ("invalid", "Bad request."),
    401: ("not_authenticated", "Authentication credentials were not provided."),
    403: ("permission_denied", "You do not have permission to perform this action."),
    404: ("not_found", "No such API endpoint or object."),
    405: ("method_not_allowed", "Method not allowed here."),
    413: ("too_large", "The request body is too large."),
    429: ("throttled", "Too many requests; retry later."),
    500: ("server_error", "Internal error; it has been logged."),
}


def is_api(request) -> bool:
    return request.path_info.startswith(API_PREFIX)


def api_error(status: int, message: str | None = None, field: str | None = None,
              code: str | None = None) -> JsonResponse:
    default_code, default_message = REASONS.get(status, ("error", "Request failed."))
    body = error_body(code or default_code, [{"field": field, "message": message
                                              or default_message}])
    return JsonResponse(body, status=status)


def _query_nul(request) -> str | None:
    """The name of the first query parameter holding a NUL character, else None."""
    for key, values in request.GET.lists():
        if NUL in key or any(NUL in value for value in values):
            return key.replace(NUL, "") or "query"
    return None


def _is_json(response) -> bool:
    return response.get("Content-Type", "").startswith(("application/json",
                                                        "application/problem+json"))


def _as_json(response) -> JsonResponse:
    replacement = api_error(response.status_code)
    for name in KEPT_HEADERS:
        if name in response:
            replacement[name] = response[name]
    return replacement


class ApiErrorMiddleware:
    """JSON errors under /api/; NUL characters in query strings refused everywhere."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            parameter = _query_nul(request)
        except TooManyFieldsSent:
            limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
            if is_api(request):
                return api_error(400, f"More than {limit} query parameters.", field="query")
            return HttpResponse(f"Bad request: more than {limit} query parameters.",
                                status=400, content_type="text/plain; charset=utf-8")
        if parameter is not None:
            if is_api(request):
                return api_error(400, f"{NUL_MESSAGE}", field=parameter)
            return HttpResponse(f"Bad request: {parameter}: {NUL_MESSAGE}", status=400,
                                content_type="text/plain; charset=utf-8")
        response = self.get_response(request)
        if is_api(request) and response.status_code >= 400 and not _is_json(response):
            return _as_json(response)
        return response

    def process_exception(self, request, exception):
        if not is_api(request):
            return None
        if isinstance(exception, RequestDataTooBig):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            return api_error(413, f"The request body is over {limit} bytes.", field="body")
        if isinstance(exception, TooManyFieldsSent):
            limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
            return api_error(400, f"More than {limit} form fields.", field="body")
        if database_unavailable(exception):
            logger.warning("database unavailable: %s %s", request.method, request.path)
            return unavailable_response(request)
        if settings.DEBUG:
            return None  # Django's technical page helps the developer more
        logger.error("Internal Server Error: %s", request.path, exc_info=exception,
                     extra={"status_code": 500, "request": request})
        return api_error(500)

